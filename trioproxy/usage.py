"""One error format for every command: ``trioproxy: error: ...`` on one line (README, docs/cli.md).

argparse's own would be ``trioproxy status: error: ...`` after a usage block; a bad flag is named
in the message instead (``trioproxy: error: status: the following arguments are required: ...``)
and exits 2, as argparse does.
"""

from __future__ import annotations

import argparse
from typing import NoReturn

PREFIX = "trioproxy: error: "


class OneLineParser(argparse.ArgumentParser):
    """Usage errors as one ``trioproxy: error:`` line naming the subcommand, exit 2."""

    def error(self, message: str) -> NoReturn:
        command = self.prog.removeprefix("trioproxy").strip()
        self.exit(2, f"{PREFIX}{command + ': ' if command else ''}{message}\n")
