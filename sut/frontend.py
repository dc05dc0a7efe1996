"""Where vLLM's front end runs for a run: the layouts a command line offers, and which one
`auto` means for an engine's arguments.

Kept apart from sut.engine_pool (which starts processes and imports vLLM's pieces) and importing
nothing: the CLI lists and checks these choices without loading the SUT.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

FRONTENDS = ("auto", "shared", "per-engine")
DEFAULT_FRONTEND = "auto"
# Engine arguments of vLLM's data-parallel layout: each worker runs one replica without them.
DATA_PARALLEL_KEYS = (
    "data_parallel_size",
    "data_parallel_size_local",
    "data_parallel_rank",
    "data_parallel_start_rank",
    "data_parallel_address",
    "data_parallel_rpc_port",
    "data_parallel_backend",
    "data_parallel_hybrid_lb",
    "data_parallel_external_lb",
)


class FrontendError(ValueError):
    """A front-end layout that cannot apply to this run (one clear line)."""


def check_frontend(name: str) -> str:
    if name not in FRONTENDS:
        raise FrontendError(f"unknown front end {name!r}: choose {' or '.join(FRONTENDS)}")
    return name


def resolve_frontend(name: str, engine_kwargs: Mapping[str, Any], dp_routing: str) -> str:
    """`auto`: one front-end process per engine where there are several engines on this
    machine and our router picks among them (on a 4x H200 host the one shared AsyncLLM held 588
    of 832 requests/s that per-engine front ends carried in full, bench/record/RESULTS.md);
    shared otherwise: one engine needs no second process, vLLM's balancer lives in the shared
    front end, and a Ray or multi-node data-parallel layout is vLLM's to place."""
    if check_frontend(name) != "auto":
        return name
    dp = int(engine_kwargs.get("data_parallel_size") or 1)
    mine = dp > 1 and dp_routing == "ours" and not placed_by_vllm(engine_kwargs)
    return "per-engine" if mine else "shared"


def placed_by_vllm(engine_kwargs: Mapping[str, Any]) -> bool:
    """A data-parallel layout vLLM places itself (its Ray backend, several nodes, their ranks
    or addresses): not one this process can start engine by engine."""
    named = any(engine_kwargs.get(k) not in (None, False) for k in DATA_PARALLEL_KEYS[1:])
    return named or str(engine_kwargs.get("distributed_executor_backend") or "") == "ray"
