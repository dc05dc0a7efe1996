"""Streaming reader for LoadGen's ``mlperf_log_accuracy.json``.

LoadGen writes one JSON array with an object per completed sample:
``{"seq_id": int, "qsl_idx": int, "data": "<hex of the response bytes>"}``. For the LLM
benchmarks the response bytes are the generated token ids in the machine's (little-endian)
byte order. A 24,576-sample OpenOrca log with 1,024-token outputs is hundreds of MB of hex,
so the array is parsed item by item and each item is turned into a compact integer array at
once instead of holding the whole document (and a copy of every hex string) in memory.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import ijson
import numpy as np

from evaluation.errors import EvaluationError
from evaluation.token_types import TOKEN_DTYPES


@dataclass(frozen=True)
class LoggedSample:
    """One deduplicated accuracy-log entry: the dataset row and the generated token ids."""

    qsl_idx: int
    token_ids: np.ndarray


def token_dtype(name: str) -> np.dtype:
    """The numpy dtype for a ``--dtype`` name, or an EvaluationError naming the choices."""
    try:
        return np.dtype(TOKEN_DTYPES[name])
    except KeyError:
        known = ", ".join(TOKEN_DTYPES)
        raise EvaluationError(
            f"unknown token dtype {name!r}: use one of {known} (the dtype the SUT sent to LoadGen)"
        ) from None


def decode_token_hex(hex_data: str, dtype: np.dtype, *, qsl_idx: int, log_path: Path) -> np.ndarray:
    """Turn one entry's ``data`` hex string into token ids, with a clear error when it cannot be."""
    if len(hex_data) % 2:
        raise EvaluationError(
            f"accuracy log {log_path}: data of qsl_idx {qsl_idx} has an odd number of hex digits "
            f"({len(hex_data)}): the log is damaged, re-run the accuracy test"
        )
    try:
        raw = bytes.fromhex(hex_data)
    except ValueError:
        raise EvaluationError(
            f"accuracy log {log_path}: data of qsl_idx {qsl_idx} is not hexadecimal: "
            "the log is damaged, re-run the accuracy test"
        ) from None
    if len(raw) % dtype.itemsize:
        other = "int64" if dtype.itemsize == 4 else "int32"
        raise EvaluationError(
            f"accuracy log {log_path}: data of qsl_idx {qsl_idx} is {len(raw)} bytes, not a "
            f"multiple of {dtype.itemsize} ({dtype.name} token ids): pass the dtype the SUT "
            f"wrote (--dtype {other}?) or re-run the accuracy test"
        )
    return np.frombuffer(raw, dtype=dtype)


def read_accuracy_log(
    path: str | Path, *, dtype: str = "int32", dataset_size: int
) -> Iterator[LoggedSample]:
    """Yield the samples of an accuracy log in log order, the first entry of each qsl_idx only.

    LoadGen may log a sample more than once (accuracy mode of a performance-sized run issues
    repeats); the reference scripts keep the first occurrence, and so do we. Each qsl_idx is
    checked against ``dataset_size`` because it indexes the dataset rows.
    """
    log_path = Path(path)
    numpy_dtype = token_dtype(dtype)
    if not log_path.is_file():
        raise EvaluationError(
            f"accuracy log {log_path} not found: pass the mlperf_log_accuracy.json of an "
            "accuracy run (--accuracy-log)"
        )
    seen: set[int] = set()
    with open(log_path, "rb") as stream:
        first = _first_non_space_byte(stream)
        if first == b"":
            raise EvaluationError(
                f"accuracy log {log_path} is empty: re-run the accuracy test, the log was not "
                "written"
            )
        if first != b"[":
            raise EvaluationError(
                f"accuracy log {log_path} is not a JSON array of samples: pass the "
                "mlperf_log_accuracy.json that LoadGen wrote in accuracy mode"
            )
        stream.seek(0)
        try:
            for position, entry in enumerate(ijson.items(stream, "item", use_float=True)):
                qsl_idx, hex_data = _entry_fields(entry, position, log_path)
                if qsl_idx in seen:
                    continue
                if not 0 <= qsl_idx < dataset_size:
                    raise EvaluationError(
                        f"accuracy log {log_path}: qsl_idx {qsl_idx} is outside the dataset "
                        f"(0..{dataset_size - 1}): pass the dataset the accuracy run used"
                    )
                seen.add(qsl_idx)
                yield LoggedSample(
                    qsl_idx,
                    decode_token_hex(hex_data, numpy_dtype, qsl_idx=qsl_idx, log_path=log_path),
                )
        except ijson.JSONError as error:
            raise _json_error(log_path, error) from None


def _first_non_space_byte(stream) -> bytes:  # type: ignore[no-untyped-def]
    while True:
        byte = stream.read(1)
        if not byte or not byte.isspace():
            return byte


def _entry_fields(entry: object, position: int, log_path: Path) -> tuple[int, str]:
    if not isinstance(entry, dict):
        raise EvaluationError(
            f"accuracy log {log_path}: entry {position} is not an object with qsl_idx and "
            "data: pass the mlperf_log_accuracy.json that LoadGen wrote"
        )
    qsl_idx = entry.get("qsl_idx")
    hex_data = entry.get("data")
    if not isinstance(qsl_idx, int) or isinstance(qsl_idx, bool):
        raise EvaluationError(
            f"accuracy log {log_path}: entry {position} has no integer qsl_idx: pass the "
            "mlperf_log_accuracy.json that LoadGen wrote"
        )
    if not isinstance(hex_data, str):
        raise EvaluationError(
            f"accuracy log {log_path}: entry {position} (qsl_idx {qsl_idx}) has no hex data "
            "string: pass the mlperf_log_accuracy.json that LoadGen wrote"
        )
    return qsl_idx, hex_data


def _json_error(log_path: Path, error: Exception) -> EvaluationError:
    size = os.path.getsize(log_path)
    detail = str(error).splitlines()[0] if str(error) else type(error).__name__
    # yajl reports a document that stops early as "premature EOF"; the pure-Python backend
    # says "Incomplete ..."; both mean the writer never closed the array.
    if "premature EOF" in detail or "Incomplete" in detail:
        return EvaluationError(
            f"accuracy log {log_path} is truncated JSON at byte {size}: re-run the accuracy "
            "test, the log was not closed (or use the untruncated copy, not the 4 KiB "
            "submission stub)"
        )
    return EvaluationError(
        f"accuracy log {log_path} is not valid JSON ({detail}): re-run the accuracy test"
    )
