"""Token ids -> LoadGen responses.

LoadGen copies the bytes a QuerySampleResponse points at during the QuerySamplesComplete (or
FirstTokenComplete) call, so the numpy buffers only need to live until that call returns; they
are kept in a local list for exactly that long. Payloads are int32 token ids and n_tokens is the
number of ids sent, which is what LoadGen's token accounting and TEST06 expect.
"""

from __future__ import annotations

from collections.abc import Sequence

import mlperf_loadgen as lg
import numpy as np


def as_payload(token_ids: Sequence[int]) -> np.ndarray:
    return np.ascontiguousarray(token_ids, dtype=np.int32)


def complete_samples(done: Sequence[tuple[int, Sequence[int]]]) -> int:
    """Report finished samples (LoadGen response id, all generated token ids) in one call.

    Returns the number of tokens reported.
    """
    if not done:
        return 0
    buffers = [as_payload(tokens) for _, tokens in done]
    responses = [
        lg.QuerySampleResponse(rid, buf.ctypes.data, buf.nbytes, buf.size)
        for (rid, _), buf in zip(done, buffers, strict=True)
    ]
    lg.QuerySamplesComplete(responses)
    return sum(buf.size for buf in buffers)


def complete_first_tokens(first: Sequence[tuple[int, Sequence[int]]]) -> None:
    """Report first tokens (Server / Interactive): must precede the sample's completion."""
    if not first:
        return
    buffers = [as_payload(tokens) for _, tokens in first]
    responses = [
        lg.QuerySampleResponse(rid, buf.ctypes.data, buf.nbytes, buf.size)
        for (rid, _), buf in zip(first, buffers, strict=True)
    ]
    lg.FirstTokenComplete(responses)


def answer_empty(response_ids: Sequence[int], *, first_token: bool = False) -> None:
    """Empty answers, built without numpy or payload code: the fallback when a report failed."""
    if not response_ids:
        return
    responses = [lg.QuerySampleResponse(rid, 0, 0, 0) for rid in response_ids]
    if first_token:
        lg.FirstTokenComplete(responses)
    else:
        lg.QuerySamplesComplete(responses)
