"""What several commands share: exit codes and the --strict exit code (shared flags: flags.py)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_STRICT = 0, 1, 2, 3


def strict_code(
    args: argparse.Namespace,
    performance: Mapping[str, Any] | None,
    accuracy: Mapping[str, Any] | None,
    test06: Mapping[str, Any] | None = None,
) -> int:
    """--strict: exit 3 when the performance test ran and is not VALID, the accuracy test
    ran and is not PASS (not scored counts as not PASS), or a TEST06 test ran and failed."""
    if not getattr(args, "strict", False):
        return EXIT_OK
    if performance and performance.get("validity") != "VALID":
        return EXIT_STRICT
    if accuracy and accuracy.get("verdict") != "PASS":
        return EXIT_STRICT
    if test06 and test06.get("passed") is not True:
        return EXIT_STRICT
    return EXIT_OK


def add_command(
    sub: Any,
    name: str,
    handler: Any,
    *,
    takes_extra: bool = False,
    starts_processes: bool = False,
    **parser_kwargs: Any,
) -> argparse.ArgumentParser:
    """A command's one registration: its name, its parser and what runs it, in the module that
    owns it. `takes_extra`: the handler gets the flags the parser does not know (engine flags,
    `handler(args, extra)`); without it they are refused. `starts_processes`: it starts an
    engine or child runs, which a guard process stops should this one be killed."""
    parser = sub.add_parser(name, **parser_kwargs)
    parser.set_defaults(
        _handler=handler,
        _takes_extra=takes_extra,
        _starts_processes=starts_processes,
        _prog=parser.prog,
    )
    return parser
