"""The `dtr` command (filled in by later steps)."""

import sys


def main(argv: list[str] | None = None) -> int:
    print("dtr: not implemented yet", file=sys.stderr)
    return 2
