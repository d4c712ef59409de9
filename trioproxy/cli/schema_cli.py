"""``trioproxy schema``: print the config's JSON Schema (draft 2020-12), generated from its description."""

from __future__ import annotations

import argparse
import sys

DESCRIPTION = "Print the JSON Schema (draft 2020-12) of the standalone config file."


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from ..config.schema import schema_text

    sys.stdout.write(schema_text())
    return 0
