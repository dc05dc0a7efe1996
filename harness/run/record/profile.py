"""`run --profile STEPS[@SKIP]`: vLLM's torch profiler over a window of the timed test, and a
summary of where the window's time went.

Why: a step of a large model costs what its GEMMs, attention, communication and sampling cost,
plus the gaps between steps where the GPU waits on the host. vLLM records that (its worker's
torch profiler, one trace per rank) when the engine is built with `profiler_config` and told to
start; this module builds that config, and reads the traces back into a summary small enough to
keep beside the run (`profile/summary.json`), since a trace of a 70B step is megabytes.

The window: the profiler starts as the performance test starts, skips SKIP engine steps (the
ramp-up, default 0) and records STEPS; it stops itself after them, so a long test is profiled
only for its window. Writing the traces stalls the engine: ~12 s for 20 steps of a 70B at TP 2
on H100s (2026-11-27), which a Server-like test sees as a TTFT spike and an Offline one as lost
time. A profiled run's figures are marked so (`sut_options.profile`) and are not a submission's.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import files
from harness.errors import UsageError

PROFILE_DIR = "profile"  # in the run's output folder: the traces, vLLM's tables, summary.json
SUMMARY_FILE = "summary.json"
MAX_STEPS = 1000  # a trace per rank holds every kernel of every step: keep it a window

# vLLM's worker names each step `execute_context_<reqs>(<tokens>)_generation_<reqs>(<tokens>)`
STEP_RE = re.compile(r"execute_context_(\d+)\((\d+)\)_generation_(\d+)\((\d+)\)")

# A kernel's category by its name, first match wins: communication, compiled fusions and
# attention before GEMM (their names may name the architecture, "sm90", or the GEMM a fusion
# feeds), GEMM before quantization (an FP8 GEMM names its scales).
CATEGORIES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern, re.IGNORECASE))
    for name, pattern in (
        (
            "communication",
            r"nccl|all_?reduce|all_?gather|reduce_?scatter|cross_device|custom_?ar|"
            r"one_?shot|two_?shot|multimem|allreduce",
        ),
        # torch.compile's fused kernels (norms, activations, FP8 quantization of activations)
        # name the graph nodes they came from, which may include the GEMM they feed
        ("fused_compiled", r"triton_(poi|red|per)_fused"),
        ("attention", r"flash|fmha|attn|attention|paged|reshape_and_cache|concat_and_cache"),
        ("gemm", r"gemm|cutlass|cublas|xmma|nvjet|matmul|scaled_mm|gemv|splitk|_mm_"),
        ("quantization", r"quant|fp8|scaled_fp8|per_token"),
        (
            "sampling",
            r"sampl|top_?k|top_?p|argmax|softmax|sort|multinomial|gumbel|exponential|penalt",
        ),
        ("norm_activation", r"rms_?norm|layer_?norm|silu|gelu|act_and_mul|rotary|rope"),
    )
)
DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


@dataclass(frozen=True)
class ProfileWindow:
    steps: int
    skip: int = 0

    def spec(self) -> str:
        return f"{self.steps}@{self.skip}" if self.skip else str(self.steps)


def parse_window(spec: str) -> ProfileWindow:
    """'STEPS' or 'STEPS@SKIP' -> ProfileWindow; one clear error otherwise."""
    steps, at, skip = spec.strip().partition("@")
    try:
        window = ProfileWindow(int(steps), int(skip) if at else 0)
    except ValueError:
        window = ProfileWindow(0)
    if not 1 <= window.steps <= MAX_STEPS or window.skip < 0:
        raise UsageError(
            f"--profile {spec!r}: write STEPS[@SKIP], STEPS engine steps to record (1 to "
            f"{MAX_STEPS}) after skipping SKIP steps of the test, e.g. --profile 40@200"
        )
    return window


def profiler_config(window: ProfileWindow, out_dir: Path) -> dict[str, Any]:
    """vLLM's `profiler_config` for the window: the torch profiler, traces into OUT/profile,
    no Python stacks (they multiply a trace's size), the front end left out (it would record
    the whole test, not the window)."""
    return {
        "profiler": "torch",
        "torch_profiler_dir": str((out_dir / PROFILE_DIR).resolve()),
        "torch_profiler_with_stack": False,
        "torch_profiler_use_gzip": True,
        "ignore_frontend": True,
        "delay_iterations": window.skip,
        "max_iterations": window.steps,
    }


def check_profile(spec: str | None, engine_overrides: Mapping[str, Any]) -> ProfileWindow | None:
    if spec is None:
        return None
    if engine_overrides.get("profiler_config"):
        raise UsageError(
            "--profile sets vLLM's profiler_config itself: drop --engine-arg profiler_config, "
            "or drop --profile and start vLLM's profiler your own way"
        )
    return parse_window(spec)


def category(kernel: str) -> str:
    for name, pattern in CATEGORIES:
        if pattern.search(kernel):
            return name
    return "other"


def _union_length(spans: Iterable[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for s, e in sorted(spans):
        if e <= end:
            continue
        total += e - max(s, end)
        end = e
    return total


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _steps(events: list[dict[str, Any]], cat: str) -> list[tuple[float, float, int, int, int, int]]:
    """(start us, duration us, prefill requests, prefill tokens, decode requests, decode
    tokens) of each step annotated in category `cat`, in time order."""
    steps = []
    for e in events:
        if e.get("cat") != cat or "dur" not in e:
            continue
        m = STEP_RE.fullmatch(str(e.get("name", "")))
        if m:
            pre_reqs, pre_tok, dec_reqs, dec_tok = (int(g) for g in m.groups())
            steps.append((float(e["ts"]), float(e["dur"]), pre_reqs, pre_tok, dec_reqs, dec_tok))
    return sorted(steps)


def summarize_trace(path: Path) -> dict[str, Any]:
    """One rank's trace -> its steps (count, time, tokens, decode-only against mixed), the
    device's kernel time by category inside the window, and the window's idle time."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        events = json.load(f).get("traceEvents", [])
    # A step's span on the device where the trace mirrors it there (`gpu_user_annotation`):
    # the host's span of a step ends when its work is launched, before the device ran it
    # (CUDA graphs, asynchronous scheduling); a CPU engine has the host's span only.
    steps, source = _steps(events, "gpu_user_annotation"), "device"
    if not steps:
        steps, source = _steps(events, "user_annotation"), "host"
    out: dict[str, Any] = {"trace": path.name, "steps": len(steps)}
    if not steps:
        return out
    out["step_spans"] = source
    t0 = steps[0][0]
    t1 = max(s[0] + s[1] for s in steps)
    window_us = t1 - t0

    def step_stats(rows: Sequence[tuple[float, float, int, int, int, int]]) -> dict[str, Any]:
        if not rows:
            return {"steps": 0}
        durs = [r[1] / 1000 for r in rows]
        return {
            "steps": len(rows),
            "mean_ms": round(sum(durs) / len(durs), 3),
            "p50_ms": round(_percentile(durs, 0.5), 3),
            "max_ms": round(max(durs), 3),
            "mean_running": round(sum(r[2] + r[4] for r in rows) / len(rows), 1),
            "mean_tokens": round(sum(r[3] + r[5] for r in rows) / len(rows), 1),
        }

    decode_only = [s for s in steps if s[2] == 0]
    mixed = [s for s in steps if s[2] > 0]
    tokens = sum(s[3] + s[5] for s in steps)
    out.update(
        {
            "window_ms": round(window_us / 1000, 3),
            # the window over its steps: a step's cost with the gaps between steps
            "interval_ms": round(window_us / 1000 / len(steps), 3),
            "tokens": tokens,
            "prefill_tokens": sum(s[3] for s in steps),
            "tokens_per_s": round(tokens / (window_us / 1e6), 1) if window_us else None,
            "all_steps": step_stats(steps),
            "decode_only": step_stats(decode_only),
            "with_prefill": step_stats(mixed),
        }
    )
    kernels = [
        e
        for e in events
        if e.get("cat") in DEVICE_CATS and "dur" in e and t0 <= float(e["ts"]) <= t1
    ]
    if not kernels:
        out["device"] = None  # a CPU engine: its trace holds host operators only
        return out
    busy_us = _union_length((float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in kernels)
    by_cat: dict[str, float] = {}
    by_name: dict[str, list[float]] = {}
    for e in kernels:
        name = str(e.get("name", ""))
        cat = "memory" if e.get("cat") != "kernel" else category(name)
        by_cat[cat] = by_cat.get(cat, 0.0) + float(e["dur"])
        entry = by_name.setdefault(name, [0.0, 0])
        entry[0] += float(e["dur"])
        entry[1] += 1
    kernel_us = sum(by_cat.values())
    top = sorted(by_name.items(), key=lambda kv: -kv[1][0])[:15]
    out["device"] = {
        "busy_ms": round(busy_us / 1000, 3),
        "busy_share": round(busy_us / window_us, 4) if window_us else None,
        "idle_ms": round((window_us - busy_us) / 1000, 3),
        "kernel_ms": round(kernel_us / 1000, 3),
        "kernels": len(kernels),
        "by_category": {
            k: {"ms": round(v / 1000, 3), "share": round(v / kernel_us, 4)}
            for k, v in sorted(by_cat.items(), key=lambda kv: -kv[1])
        },
        "top_kernels": [
            {
                "name": name[:160],
                "category": category(name),
                "ms": round(us / 1000, 3),
                "calls": int(n),
            }
            for name, (us, n) in top
        ],
    }
    return out


def summarize(profile_dir: Path) -> dict[str, Any]:
    """Every rank's trace in OUT/profile -> summary.json there (written aside, then renamed);
    returns what result.json records under `profile`."""
    # one folder per engine under --frontend per-engine (sut.engine_pool), else all here
    traces = sorted(profile_dir.glob("**/*.pt.trace.json*"))
    summary: dict[str, Any] = {
        "dir": str(profile_dir),
        "ranks": [summarize_trace(t) for t in traces],
    }
    if not traces:
        summary["error"] = f"vLLM wrote no trace into {profile_dir}"
    files.write_text(profile_dir / SUMMARY_FILE, json.dumps(summary, indent=2) + "\n")
    return summary


def brief(summary: dict[str, Any]) -> str:
    """One line for the terminal: rank 0's window, its step time and device busy share."""
    ranks = [r for r in summary.get("ranks", []) if r.get("steps")]
    if not ranks:
        return f"profile: {summary.get('error') or 'no engine steps in the window'}"
    r = ranks[0]
    line = (
        f"profile: {r['steps']} steps in {r['window_ms']:.0f} ms, "
        f"{r['interval_ms']:.2f} ms a step, {r['tokens_per_s']} tok/s"
    )
    dev = r.get("device")
    if dev:
        cats = ", ".join(f"{k} {v['share']:.0%}" for k, v in list(dev["by_category"].items())[:4])
        line += f"; device busy {dev['busy_share']:.0%} ({cats})"
    return line + f" ({len(ranks)} rank trace(s) in {summary['dir']})"
