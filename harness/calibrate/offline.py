"""Offline calibration: one short LoadGen Offline performance test (a real `mlperf-vllm run` in
its own process: LoadGen reads mlperf.conf once per process) gives samples/s on this dataset with
this engine; `target_qps` (LoadGen's offline_expected_qps) = measured x margin. LoadGen then
issues max(min_query_count, 1.1 x min_duration x qps) samples, so the real run lasts about
1.1 x margin x min_duration at the measured rate: min_duration is still met if the real run is
up to that much faster than the short measurement (a warm engine, fuller batches).
"""

from __future__ import annotations

import math
import time
from pathlib import Path

from harness.benchmarks import Benchmark
from harness.calibrate.conf import demo_lines, write_conf
from harness.calibrate.measure import run_once
from harness.calibrate.request import CalibrateRequest
from harness.errors import UsageError
from harness.run.setup.settings import OFFLINE_SLACK

OFFLINE_KEYS = ("target_qps", "min_duration", "min_query_count")


def calibrate_offline(req: CalibrateRequest, bench: Benchmark, lg_model: str, size: int) -> Path:
    """Measure, then write OUTPUT/user.conf: the base conf with the Offline target."""
    block = offline_lines(req, bench, lg_model, size)
    base = req.user_conf.read_text() if req.user_conf else ""
    conf = req.output / "user.conf"
    write_conf(conf, "", base, OFFLINE_KEYS, block)
    print("\n".join(line for line in block if line.startswith("#")))
    print(f"user.conf written: {conf}")
    return conf


def offline_lines(req: CalibrateRequest, bench: Benchmark, lg_model: str, size: int) -> list[str]:
    """One short Offline measurement in its own process; the conf lines its rate gives."""
    n = req.measure_samples
    conf = req.output / "measure-offline.conf"
    conf.write_text(
        "# calibrate: one short Offline measurement (not a benchmark run)\n"
        f"{lg_model}.Offline.min_duration = 0\n"
        f"{lg_model}.Offline.min_query_count = {n}\n"
        f"{lg_model}.Offline.target_qps = 1\n"
    )
    perf = run_once(req, "Offline", conf, req.output / "measure-offline")
    sps = perf.get("samples_per_second")
    if not sps:
        raise UsageError(f"the calibration run reported no samples/s ({req.output})")
    tps = perf.get("tokens_per_second")
    took = perf.get("duration_s") or 0.0
    if took < 10:
        print(
            f"calibrate: warning: the measurement took {took:.1f} s; under ~10 s it may "
            "underestimate the real run's rate: raise --measure-samples",
            flush=True,
        )
    qps = math.ceil(sps * req.margin * 1000) / 1000
    dur = req.min_duration_s
    mqc = size if size < bench.total_sample_count else bench.total_sample_count
    issued = max(mqc, int(OFFLINE_SLACK * dur * qps))
    lines = [
        f"# --- mlperf-vllm calibrate, {time.strftime('%Y-%m-%d %H:%M')} ---",
        f"# measured: {perf.get('sample_count')} samples in {took:.1f} s "
        f"= {sps:.3f} samples/s, {tps or 0:.1f} tokens/s (LoadGen Offline, this engine)",
        f"# target_qps (offline_expected_qps) = {sps:.3f} x margin {req.margin:g} = {qps:g}: "
        f"LoadGen issues max({mqc}, 1.1 x {dur:g} s x {qps:g}) = {issued} samples, "
        f"~{issued / sps:.0f} s at the measured rate (min_duration {dur:g} s)",
        f"{lg_model}.Offline.target_qps = {qps:g}",
    ]
    return lines + demo_lines(bench, lg_model, "Offline", req, size)
