"""The one exception type the CLI turns into a clear line and exit code 2, and the hint its
messages give for a mistyped name."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(name: str, names: Iterable[str]) -> str:
    """` (did you mean X?)` for the closest of `names` to a mistyped `name`, else ``."""
    near = difflib.get_close_matches(name, list(names), n=1)
    return f" (did you mean {near[0]}?)" if near else ""


class UsageError(Exception):
    """Bad input: the message names the problem and the fix, in one line."""
