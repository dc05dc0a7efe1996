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


# Every command's exit codes, shown at the end of its --help (build_parser attaches them).
# The lines every command shares come last, after the command's own.
_SHARED_CODES = (
    "2 bad input: one `error:` line naming the problem and the fix, before anything is written",
    "1 any other failure (an engine that died, a full disk, an internal error): the reason on "
    "stderr",
    "130 interrupted (Ctrl-C or SIGTERM): files written before are kept whole",
)
_OWN_CODES = {
    "run": (
        "0 the run completed, also when it is INVALID or fails accuracy (the verdict is printed "
        "and recorded in result.json)",
        "3 with --strict: the performance run is INVALID, the accuracy run FAILs or is not "
        "scored, or TEST06 failed",
    ),
    "evaluate": (
        "0 the log was scored, also when the accuracy FAILs (the verdict is printed and in "
        "accuracy.json)",
        "3 with --strict: the accuracy FAILs",
    ),
    "calibrate": (
        "0 user.conf written (with --confirm: a target held for the full duration; without it "
        "the conf says NOT CONFIRMED)",
        "2 also when no trial passed or no confirmation run held: the conf and calibration.json "
        "say what was tried",
    ),
    "check-submission": (
        "0 every rule holds for the whole tree (with --official: the official checker passed too)",
        "3 a rule fails (the rows say which and how to fix it), or the official checker "
        "reported errors",
    ),
    "compliance": ("0 the checks ran", "3 with --strict: a check failed"),
    "package": (
        "0 packaged (the fields still to fill in are listed; check-submission judges them)",
    ),
    "sweep": ("0 the sweep finished; its report judges each config",),
    "demo": ("0 the demo ran end to end (the tiny model's accuracy FAILs by design)",),
    "compare": ("0 the table was printed",),
}


def exit_codes_epilog(command: str) -> str:
    """The `exit codes:` paragraph of one command's --help."""
    codes = (*_OWN_CODES.get(command, ("0 done",)), *_SHARED_CODES)
    return "exit codes: " + "; ".join(codes) + "."
