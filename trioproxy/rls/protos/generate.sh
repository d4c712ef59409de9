#!/bin/sh
# Regenerates the checked-in *_pb2.py / *_pb2_grpc.py from our .proto files (run from anywhere).
set -e
cd "$(dirname "$0")/../../.."
python -m grpc_tools.protoc -I . --python_out=. --grpc_python_out=. \
  trioproxy/rls/protos/core_base.proto trioproxy/rls/protos/ratelimit_common.proto \
  trioproxy/rls/protos/rls.proto trioproxy/rls/protos/health.proto
