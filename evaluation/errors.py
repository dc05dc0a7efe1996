"""The one exception type of the evaluation package."""

from __future__ import annotations


class EvaluationError(Exception):
    """Bad input to an accuracy evaluation.

    The message is a single line that names the problem and how to fix it; the
    command line prints it as is and exits with code 2.
    """
