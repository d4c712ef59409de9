#!/bin/sh
# Regenerates the checked-in *_pb2.py / *_pb2_grpc.py from our .proto files (run from anywhere).
set -e
cd "$(dirname "$0")/../../.."
python -m grpc_tools.protoc -I . --python_out=. --pyi_out=. \
  trioproxy/rls/protos/core_base.proto trioproxy/rls/protos/ratelimit_common.proto \
  trioproxy/rls/protos/rls.proto
# Generated code: not ours to lint or type-check.
for f in trioproxy/rls/protos/*_pb2.py trioproxy/rls/protos/*_pb2.pyi; do
  printf '# ruff: noqa\n# mypy: ignore-errors\n' | cat - "$f" > "$f.tmp" && mv "$f.tmp" "$f"
done
