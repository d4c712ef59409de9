"""``trioproxy status --config FILE [-o json|yaml]``: the computed status of the Kubernetes-style
resources of a manifest (docs/manifests.md), as a list of ``{apiVersion, kind, metadata, status}``.

A resource that is not accepted is a status, not a failure: exit 0. Exit 1 with one-line errors
only when the file cannot be read or parsed, or is not a manifest (a standalone config).
"""

from __future__ import annotations

import argparse
import json
import sys
from io import StringIO
from pathlib import Path

DESCRIPTION = "Print the computed status of the Gateway, HTTPRoute and ProxyPolicy resources of a manifest."


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-f", "--config", metavar="FILE", required=True, help="manifest (multi-document YAML)")
    parser.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml", help="output format (default yaml)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from ..config.manifest import ManifestError, is_manifest_text, parse_documents, statuses_of

    name = str(args.config)
    try:
        text = Path(name).read_text(encoding="utf-8")
    except OSError as exc:
        print(f"trioproxy: error: {name}: cannot read config file: {exc.strerror or exc}", file=sys.stderr)
        return 1
    except UnicodeDecodeError:
        print(f"trioproxy: error: {name}: config file is not UTF-8 text", file=sys.stderr)
        return 1
    try:
        if not is_manifest_text(parse_documents(text, name)):
            # A standalone config has no resources; its statuses would be an empty list after a
            # warning about apiVersion=None, which reads as "nothing applied".
            print(f"trioproxy: error: {name}: not a manifest (no document has apiVersion and kind); "
                  f"status reads Gateway, HTTPRoute and ProxyPolicy resources. A standalone config: "
                  f"trioproxy --config {name} --validate-only", file=sys.stderr)
            return 1
        statuses, rejected = statuses_of(text, name)
    except ManifestError as error:
        for problem in error.problems:
            print(f"trioproxy: error: {problem}", file=sys.stderr)
        return 1
    for line in rejected:
        print(f"trioproxy: warning: {line}", file=sys.stderr)
    if args.output == "json":
        print(json.dumps(list(statuses), indent=2))
    else:
        from ruamel.yaml import YAML

        yaml = YAML(typ="safe", pure=True)
        yaml.default_flow_style = False
        yaml.sort_base_mapping_type_on_output = False  # type: ignore[assignment]
        out = StringIO()
        yaml.dump(list(statuses), out)
        print(out.getvalue(), end="")
    return 0
