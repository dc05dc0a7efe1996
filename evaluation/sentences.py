"""Sentence splitting with NLTK's Punkt model, from local data only.

The reference scripts call ``nltk.download("punkt_tab")`` at run time. An accuracy
certification must not depend on the network, so the model is looked up in directories we
are given (``--nltk-data``, else ``NLTK_DATA``, else NLTK's default locations) and a missing
model is one clear error saying how to install it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import nltk
from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer, load_punkt_params

from evaluation.errors import EvaluationError

PUNKT_RESOURCE = "tokenizers/punkt_tab/english/"


def nltk_search_path(nltk_data: str | Path | None = None) -> list[str]:
    """Directories searched for the Punkt model: the explicit one only, when given."""
    if nltk_data is not None:
        return [str(nltk_data)]
    from_env = [entry for entry in os.environ.get("NLTK_DATA", "").split(os.pathsep) if entry]
    return from_env + [entry for entry in nltk.data.path if entry not in from_env]


def find_punkt_directory(nltk_data: str | Path | None = None) -> str:
    """The NLTK data root that holds ``tokenizers/punkt_tab/english``, or an EvaluationError."""
    search = nltk_search_path(nltk_data)
    for root in search:
        if (Path(root) / PUNKT_RESOURCE).is_dir():
            return root
    shown = ", ".join(search) if search else "(none)"
    raise EvaluationError(
        f"NLTK punkt_tab data not found (searched {shown}): install it once with "
        "`python -m nltk.downloader -d DIR punkt_tab` and pass --nltk-data DIR or set NLTK_DATA=DIR"
    )


@contextmanager
def _nltk_root(root: str) -> Iterator[None]:
    # NLTK only opens data files under a root listed in nltk.data.path; list ours for the
    # duration of the load and put the list back as it was.
    nltk.data.path.insert(0, root)
    try:
        yield
    finally:
        nltk.data.path.remove(root)


def load_punkt_parameters(nltk_data_root: str) -> PunktParameters:
    """Read the English Punkt model from one NLTK data root (as found by find_punkt_directory)."""
    with _nltk_root(nltk_data_root):
        try:
            pointer = nltk.data.find(PUNKT_RESOURCE, paths=[nltk_data_root])
            return load_punkt_params(pointer)
        except (LookupError, OSError) as error:
            first_line = next((ln for ln in str(error).splitlines() if ln.strip()), "")
            raise EvaluationError(
                f"NLTK punkt_tab data under {nltk_data_root} is unreadable ({first_line.strip()}): "
                "reinstall it with `python -m nltk.downloader -d DIR punkt_tab`"
            ) from None


class SentenceSplitter:
    """``nltk.sent_tokenize(text)`` (English) with a model loaded from an explicit directory."""

    def __init__(self, parameters: PunktParameters) -> None:
        self._punkt = PunktSentenceTokenizer(parameters)

    @classmethod
    def from_nltk_data(cls, nltk_data_root: str) -> SentenceSplitter:
        return cls(load_punkt_parameters(nltk_data_root))

    def split(self, text: str) -> list[str]:
        return self._punkt.tokenize(text)

    def postprocess(self, text: str) -> str:
        """The reference postprocessing: strip, then one sentence per line (for rougeLsum)."""
        return "\n".join(self.split(text.strip()))

    def postprocess_all(self, texts: Sequence[str]) -> list[str]:
        return [self.postprocess(text) for text in texts]
