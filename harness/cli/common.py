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
