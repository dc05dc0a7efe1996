"""Dataset loading and validation: official formats in, token-id prompts out.

Formats: JSON records (CNN/DailyMail `cnn_eval.json`), pickled pandas frames (OpenOrca and
the 405B mix, as MLCommons ships them), Parquet, and JSON lines. Unpickling runs code, so
pickles load only with an explicit `allow_pickle=True` (`--allow-pickle`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, overload

from harness.benchmarks import Benchmark
from harness.errors import UsageError

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

PICKLE_SUFFIXES = (".pkl", ".pickle")


class TokenPrompts(Sequence[list[int]]):
    """Every prompt's token ids in one flat integer array plus offsets: `prompts[i]` is sample
    index i's ids as a fresh list of ints. 4 bytes a token (int32; int64 only for ids beyond
    its range) instead of a Python list per prompt beside the frame's own column: for 405B's
    8,313 long prompts that is the difference between megabytes and gigabytes."""

    def __init__(self, flat: np.ndarray, offsets: np.ndarray):
        self.flat = flat
        self.offsets = offsets  # len(self) + 1 positions into flat

    @classmethod
    def pack(cls, prompts: Sequence[np.ndarray]) -> TokenPrompts:
        import numpy as np

        lengths = np.fromiter((len(p) for p in prompts), dtype=np.int64, count=len(prompts))
        offsets = np.zeros(len(prompts) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        flat = np.concatenate(prompts) if prompts else np.zeros(0, dtype=np.int64)
        info = np.iinfo(np.int32)
        if flat.size == 0 or (flat.min() >= info.min and flat.max() <= info.max):
            flat = flat.astype(np.int32)
        return cls(flat, offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @overload
    def __getitem__(self, index: int) -> list[int]: ...

    @overload
    def __getitem__(self, index: slice) -> list[list[int]]: ...

    def __getitem__(self, index: int | slice) -> list[int] | list[list[int]]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(f"prompt index {index} out of range for {n} prompts")
        return self.flat[self.offsets[index] : self.offsets[index + 1]].tolist()

    def lengths(self) -> list[int]:
        return (self.offsets[1:] - self.offsets[:-1]).tolist()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TokenPrompts):
            return len(self) == len(other) and bool(
                (self.offsets == other.offsets).all() and (self.flat == other.flat).all()
            )
        if isinstance(other, Sequence) and not isinstance(other, str):
            return len(self) == len(other) and all(self[i] == list(p) for i, p in enumerate(other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable arrays inside, like a list


@dataclass(frozen=True)
class LoadedDataset:
    path: Path
    frame: pd.DataFrame
    prompts: TokenPrompts  # token ids per sample index

    @property
    def size(self) -> int:
        return len(self.prompts)

    def input_lengths(self) -> list[int]:
        return self.prompts.lengths()


def file_sha256(path: str | Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def read_frame(path: str | Path, *, allow_pickle: bool = False) -> pd.DataFrame:
    """Read a dataset file into a DataFrame by its format; one clear error for bad input."""
    import pandas as pd

    p = Path(path)
    if not p.exists():
        raise UsageError(f"dataset {p} does not exist: pass --dataset with the path of the file")
    if p.is_dir():
        raise UsageError(f"dataset {p} is a folder: pass the dataset file inside it")
    suffix = p.suffix.lower()
    try:
        if suffix in PICKLE_SUFFIXES:
            if not allow_pickle:
                raise UsageError(
                    f"dataset {p} is a pickle, and loading a pickle runs code from the file: "
                    "add --allow-pickle if you trust it (or convert it to Parquet)"
                )
            frame = pd.read_pickle(p)
        elif suffix == ".parquet":
            frame = pd.read_parquet(p)
        elif suffix in (".jsonl", ".ndjson"):
            frame = pd.read_json(p, lines=True)
        elif suffix == ".json":
            frame = pd.read_json(p)
        else:
            raise UsageError(
                f"dataset {p}: unknown format {suffix or '(no suffix)'}: use .json, .jsonl, "
                ".parquet or (with --allow-pickle) .pkl"
            )
    except UsageError:
        raise
    except Exception as exc:
        raise UsageError(
            f"dataset {p} could not be read as {suffix.lstrip('.')}: {str(exc).splitlines()[0]}"
            " (is the file complete and in the format its suffix says?)"
        ) from None
    if not isinstance(frame, pd.DataFrame):
        raise UsageError(
            f"dataset {p} holds a {type(frame).__name__}, not a table: expected a pandas "
            "DataFrame with the benchmark's columns"
        )
    return frame


def _as_token_array(value, row: int, column: str, path: Path) -> np.ndarray:
    import numpy as np

    if isinstance(value, str):
        raise UsageError(
            f"dataset {path}: row {row} column {column!r} holds text, not token ids: "
            "the column must hold lists of integer token ids (tokenize the prompts first)"
        )
    try:
        arr = np.asarray(value)
    except Exception:
        arr = None
    if arr is None or arr.ndim != 1 or arr.size == 0:
        raise UsageError(
            f"dataset {path}: row {row} column {column!r} is not a non-empty list of token ids"
        )
    if not np.issubdtype(arr.dtype, np.integer):
        if np.issubdtype(arr.dtype, np.floating) and np.all(np.mod(arr, 1) == 0):
            arr = arr.astype(np.int64)
        else:
            raise UsageError(
                f"dataset {path}: row {row} column {column!r} has non-integer token ids "
                f"(dtype {arr.dtype}): token ids must be integers"
            )
    return arr.astype(np.int64)


def load_dataset(
    path: str | Path,
    bench: Benchmark,
    *,
    allow_pickle: bool = False,
    need_targets: bool = False,
) -> LoadedDataset:
    """Load and validate a dataset for a benchmark: columns present, not empty, integer ids."""
    p = Path(path)
    frame = read_frame(p, allow_pickle=allow_pickle)
    if frame.empty:
        raise UsageError(f"dataset {p} is empty: it must hold at least one sample")
    col = bench.schema.prompt_column
    required = [col]
    if need_targets:
        required.append(bench.schema.target_column)
        if bench.schema.metric_column:
            required.append(bench.schema.metric_column)
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise UsageError(
            f"dataset {p} lacks column(s) {', '.join(map(repr, missing))} needed by {bench.name} "
            f"(has {', '.join(map(str, frame.columns))}): use the benchmark's preprocessed file"
        )
    prompts = TokenPrompts.pack(
        [_as_token_array(v, i, col, p) for i, v in enumerate(frame[col].tolist())]
    )
    return LoadedDataset(path=p, frame=frame.reset_index(drop=True), prompts=prompts)


def output_lengths(
    dataset: LoadedDataset, column: str, max_tokens: int, *, least: int = 1
) -> list[int]:
    """Each sample's output length from an integer column of the dataset, each in
    [least, max_tokens] (`run --output-lengths`: a weights-free run that follows a benchmark's
    output length profile). Scenarios with a TPOT take `least` 2: LoadGen logs an error for
    every one-token output (it cannot form a time per output token from one)."""
    import pandas as pd

    frame, p = dataset.frame, dataset.path
    if column not in frame.columns:
        raise UsageError(
            f"dataset {p} has no column {column!r} for --output-lengths (has "
            f"{', '.join(map(str, frame.columns))}): name an integer column of output lengths"
        )
    values = pd.to_numeric(frame[column], errors="coerce")
    bad = (values.isna() | (values % 1 != 0)).to_numpy()
    if bad.any():
        row = int(bad.argmax())
        raise UsageError(
            f"dataset {p}: column {column!r} row {row} is {frame[column].tolist()[row]!r}, not a "
            "whole number of tokens: --output-lengths needs one integer per sample"
        )
    lengths = values.astype("int64")
    for row in (int(lengths.argmin()), int(lengths.argmax())):
        if not least <= lengths.iloc[row] <= max_tokens:
            why = "the run's max_tokens" if least == 1 else "LoadGen needs 2 for a TPOT"
            raise UsageError(
                f"dataset {p}: column {column!r} row {row} asks for {lengths.iloc[row]} output "
                f"tokens, outside {least}..{max_tokens} ({why}): fix the column or raise "
                "--max-tokens"
            )
    return lengths.tolist()


def validate_against_model(
    prompts: Sequence[Sequence[int]],
    *,
    vocab_size: int,
    max_model_len: int | None,
    max_tokens: int,
    path: Path,
) -> None:
    """Token ids must exist in the model's vocabulary and prompts must fit its context."""
    lo = min(min(p) for p in prompts)
    hi_row, hi = max(((i, max(p)) for i, p in enumerate(prompts)), key=lambda t: t[1])
    if lo < 0:
        raise UsageError(f"dataset {path}: negative token id {lo}: token ids must be >= 0")
    if hi >= vocab_size:
        raise UsageError(
            f"dataset {path}: token id {hi} (row {hi_row}) is outside the model's vocabulary of "
            f"{vocab_size}: the dataset was tokenized for another model (tokenizer/model mismatch)"
        )
    if max_model_len:
        longest_row, longest = max(((i, len(p)) for i, p in enumerate(prompts)), key=lambda t: t[1])
        if longest + 1 > max_model_len:
            raise UsageError(
                f"dataset {path}: prompt of row {longest_row} has {longest} tokens, more than the "
                f"engine's max_model_len {max_model_len} allows: raise --max-model-len "
                f"(prompt + {max_tokens} output tokens should fit) or use the right dataset"
            )


def model_vocab_and_context(model_dir: str | Path) -> tuple[int, int | None]:
    """vocab_size and max_position_embeddings from a checkpoint's config.json (no weights)."""
    cfg_path = Path(model_dir) / "config.json"
    if not cfg_path.exists():
        raise UsageError(
            f"model {model_dir} has no config.json: pass --model with a local checkpoint folder"
        )
    cfg = _model_json(cfg_path)
    text_cfg = cfg.get("text_config", cfg)
    try:
        return int(text_cfg["vocab_size"]), text_cfg.get("max_position_embeddings")
    except (KeyError, TypeError, ValueError):
        raise UsageError(
            f"model {model_dir}: config.json has no usable vocab_size: pass --model a complete "
            "checkpoint folder"
        ) from None


def _model_json(path: Path) -> dict:
    """A JSON object from a checkpoint folder, or one line saying what is wrong with it."""
    import json

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        data = None
    except ValueError as exc:
        raise UsageError(
            f"{path} is not valid JSON ({exc}): pass --model a checkpoint folder whose "
            f"{path.name} is intact (a download cut short leaves such files)"
        ) from None
    if not isinstance(data, dict):
        raise UsageError(f"{path} holds no JSON object: pass --model an intact checkpoint folder")
    return data


def check_tokenizer_matches(model_dir: str | Path, vocab_size: int) -> None:
    """A tokenizer folder whose vocabulary exceeds the model's embedding table is a mismatch."""
    tok_file = Path(model_dir) / "tokenizer.json"
    if not tok_file.exists():
        return
    data = _model_json(tok_file)
    ids = list((data.get("model", {}).get("vocab") or {}).values())
    ids += [t.get("id", 0) for t in data.get("added_tokens", [])]
    n = max(ids, default=-1) + 1
    if n > vocab_size:
        raise UsageError(
            f"tokenizer in {model_dir} has {n} tokens but the model's vocabulary is {vocab_size}: "
            "the tokenizer belongs to another model"
        )
