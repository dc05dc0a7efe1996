"""The one exception type the CLI turns into a clear line and exit code 2."""

from __future__ import annotations


class UsageError(Exception):
    """Bad input: the message names the problem and the fix, in one line."""
