"""The user.conf lines a calibration writes beside the measured target: the base conf with the
lines it replaces commented out, the NOT COMPLIANT lines of a demo-sized calibration and the
Server query count LoadGen's early stopping needs."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from pathlib import Path

from harness import files
from harness.benchmarks import Benchmark
from harness.calibrate.request import SUBMISSION_MIN_DURATION_S, CalibrateRequest
from harness.run.record.timeline import EARLY_STOPPING_MIN_QUERIES
from harness.run.setup.settings import whole_passes
from harness.run.setup.user_conf import parse_lines

DEMO_BANNER = "# NOT COMPLIANT (demo calibration): see the NOT COMPLIANT lines at the end.\n"


def conf_key_lines(text: str, keys: Sequence[str]) -> str:
    """The base conf without the lines that set `keys` (we write those)."""
    out = []
    for line in text.splitlines():
        body = line.split("#", 1)[0].strip()
        key = body.split("=", 1)[0].strip() if "=" in body else ""
        if key and any(key.endswith("." + k) for k in keys):
            out.append(f"# (replaced by calibrate) {line}")
        else:
            out.append(line)
    return "\n".join(out).rstrip() + "\n"


def demo_lines(
    bench: Benchmark, lg_model: str, lg_scenario: str, req: CalibrateRequest, dataset_size: int
) -> list[str]:
    """Lines for a demo-sized run (short min_duration, small dataset): never compliant."""
    lines = []
    if req.min_duration_s < SUBMISSION_MIN_DURATION_S:
        lines += [
            "# NOT COMPLIANT: --min-duration-s below 600 (a demo / CPU calibration)",
            f"{lg_model}.{lg_scenario}.min_duration = {int(req.min_duration_s * 1000)}",
        ]
    if lg_scenario == "Offline" and dataset_size < bench.total_sample_count:
        lines += [
            f"# NOT COMPLIANT: the dataset has {dataset_size} of "
            f"{bench.total_sample_count} samples",
            f"{lg_model}.Offline.min_query_count = {dataset_size}",
        ]
    return lines


def padded_over(base: str, lg_model: str, loaded: int) -> int:
    """The samples a Server run's query count is padded to whole passes over: the loaded
    samples (a base conf's performance_sample_count_override first), 0 where the base conf
    turns equal issue off (every Llama benchmark's mlperf.conf turns it on)."""
    for line in parse_lines(base):
        parts = line.parts
        if parts is None or line.value is None or parts[0] not in ("*", lg_model):
            continue
        if parts[1] not in ("*", "Server"):
            continue
        try:
            value = int(float(line.value))
        except ValueError:
            continue
        if parts[2] == "performance_sample_count_override" and value > 0:
            loaded = min(loaded, value)
        elif parts[2] == "sample_concatenate_permutation" and not value:
            return 0
    return loaded


def early_stopping_lines(
    lg_model: str, target: float, min_duration_s: float, base: str, loaded: int
) -> list[str]:
    """A Server min_query_count line when the run would issue too few queries for LoadGen's
    early stopping to certify the p99 (such a run is INVALID however fast the engine): enough
    queries for one of them to be over a limit. LoadGen pads an LLM Server run to whole passes
    over the `loaded` samples (equal issue), so what counts is the padded count; where the
    padding makes the run far longer than min_duration (a slow benchmark over its whole
    dataset: the 405B at 0.7 QPS over 8,313 samples runs 3.3 h), a comment says so."""
    need = EARLY_STOPPING_MIN_QUERIES
    by_time = math.floor(target * min_duration_s) + 1  # as issue_plan counts them
    issued = whole_passes(by_time, loaded)
    for line in parse_lines(base):
        if line.key in (f"{lg_model}.Server.min_query_count", "*.Server.min_query_count"):
            with contextlib.suppress(TypeError, ValueError):
                need = max(need, int(float(line.value)))  # type: ignore[arg-type]
    passes = f"whole passes over {loaded:,} loaded samples: equal issue" if loaded > 0 else ""
    if issued >= EARLY_STOPPING_MIN_QUERIES:
        if issued / target <= 1.1 * min_duration_s:
            return []
        return [
            f"# {target:g} QPS for {min_duration_s:g} s issues about {issued:,} queries "
            f"({passes}): the run lasts about {issued / target:,.0f} s"
        ]
    queries = whole_passes(need, loaded)
    return [
        f"# min_query_count {need}: LoadGen's early stopping certifies a p99 only from "
        f"{EARLY_STOPPING_MIN_QUERIES} queries (one of them over a limit); {target:g} QPS x "
        f"{min_duration_s:g} s issues about {issued}"
        + (f" ({passes})" if passes else "")
        + f", so the run issues {queries:,} and lasts about {queries / target:,.0f} s",
        f"{lg_model}.Server.min_query_count = {need}",
    ]


def write_conf(path: Path, banner: str, base: str, keys: Sequence[str], body: list[str]) -> None:
    """user.conf: `banner`, the base conf without the lines that set `keys`, then `body`;
    written aside and renamed into place. A base conf opens with "COMPLIANT"; a demo-sized
    result must say otherwise on line one."""
    if any(line.startswith("# NOT COMPLIANT") for line in body):
        banner += DEMO_BANNER
    text = conf_key_lines(base, keys) if base else ""
    files.write_text(path, banner + text + "\n".join(body) + "\n")
