"""`run --profile`: the window's spelling, vLLM's profiler config it builds, and the summary of a
trace in the torch profiler's Chrome format (harness/run/record/profile.py).

The engine side (vLLM's profiler started at the test, its traces read back) runs for real in
test_offline_options_e2e (the Offline SUT) and test_parallel_e2e (the streaming SUT, two data-
parallel engines). A CPU engine's trace holds no device kernels, so the device half of the
summary is checked here on a trace written in the profiler's format: two steps, kernels of each
category, one gap between the steps and one kernel overlapping another.
"""

from __future__ import annotations

import gzip
import json

import pytest

from harness.errors import UsageError
from harness.run.record.profile import (
    ProfileWindow,
    category,
    check_profile,
    parse_window,
    profiler_config,
    summarize,
)


def test_window_spelling():
    assert parse_window("40") == ProfileWindow(40, 0)
    assert parse_window("40@200") == ProfileWindow(40, 200)
    assert parse_window("40@200").spec() == "40@200" and parse_window("7").spec() == "7"
    for bad in ("", "0", "x", "40@", "40@-1", "-3", "5000", "4@2@1"):
        with pytest.raises(UsageError, match="STEPS\\[@SKIP\\]"):
            parse_window(bad)


def test_profile_refuses_a_profiler_config_of_its_own(tmp_path):
    assert check_profile(None, {"profiler_config": {"profiler": "torch"}}) is None
    with pytest.raises(UsageError, match="drop --engine-arg profiler_config"):
        check_profile("10", {"profiler_config": {"profiler": "torch"}})
    conf = profiler_config(ProfileWindow(10, 3), tmp_path / "run")
    assert conf["profiler"] == "torch" and conf["max_iterations"] == 10
    assert conf["delay_iterations"] == 3 and conf["ignore_frontend"] is True
    assert conf["torch_profiler_dir"] == str((tmp_path / "run" / "profile").resolve())


@pytest.mark.parametrize(
    "name, expected",
    [
        (
            "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
            "communication",
        ),
        ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 2>(...)", "communication"),
        (
            "void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64>, sm90>",
            "attention",
        ),
        ("void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, unsigned char>", "attention"),
        ("void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<sm90 fp8>>", "gemm"),
        ("nvjet_tst_128x256_64x4_2x1_v_bz_coopB_TNN", "gemm"),
        ("void vllm::dynamic_scaled_fp8_quant_kernel<c10::BFloat16>", "quantization"),
        ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4>", "sampling"),
        ("void vllm::rms_norm_kernel<c10::BFloat16>", "norm_activation"),
        ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0", "fused_compiled"),
        # a fusion names the graph nodes it came from, the GEMM it feeds among them
        (
            "triton_red_fused__to_copy_abs_clamp_cutlass_scaled_mm_div_fused_add_rms_norm_3",
            "fused_compiled",
        ),
        ("void at::native::vectorized_elementwise_kernel<4>", "other"),
    ],
)
def test_kernel_categories(name, expected):
    assert category(name) == expected


def _write_trace(path, events):
    with gzip.open(path, "wt") as f:
        json.dump({"schemaVersion": 1, "traceEvents": events}, f)


def test_summary_of_a_device_trace(tmp_path):
    d = tmp_path / "profile"
    d.mkdir()
    step = {"ph": "X", "cat": "user_annotation", "pid": 1, "tid": 1}

    def kernel(name, ts, dur):
        return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur, "pid": 0, "tid": 7}

    events = [
        # a step with one prefill of 100 tokens and 3 decodes, then a decode-only step of 4
        {**step, "name": "execute_context_1(100)_generation_3(3)", "ts": 1000.0, "dur": 400.0},
        {**step, "name": "execute_context_0(0)_generation_4(4)", "ts": 1500.0, "dur": 300.0},
        {**step, "name": "some_other_annotation", "ts": 1000.0, "dur": 5000.0},
        kernel("void cutlass::device_kernel<gemm>", 1000.0, 200.0),
        kernel("void flash::flash_fwd_kernel", 1150.0, 100.0),  # overlaps the GEMM by 50
        kernel("ncclDevKernel_AllReduce_Sum", 1300.0, 50.0),
        # the gap 1350-1500 is idle; the second step
        kernel("void cutlass::device_kernel<gemm>", 1500.0, 150.0),
        kernel("void vllm::rms_norm_kernel", 1650.0, 50.0),
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "ts": 1720.0, "dur": 30.0},
        kernel("void cutlass::device_kernel<gemm>", 9000.0, 500.0),  # outside the window
    ]
    _write_trace(d / "rank0.1.pt.trace.json.gz", events)
    summary = summarize(d)
    assert json.loads((d / "summary.json").read_text()) == summary
    (r,) = summary["ranks"]
    assert r["steps"] == 2 and r["tokens"] == 107 and r["prefill_tokens"] == 100
    assert r["step_spans"] == "host"  # no device spans of the steps in this trace
    assert r["window_ms"] == pytest.approx(0.8)  # 1000 -> 1800 us
    assert r["interval_ms"] == pytest.approx(0.4)
    assert r["with_prefill"]["steps"] == 1 and r["with_prefill"]["mean_ms"] == pytest.approx(0.4)
    assert r["decode_only"]["steps"] == 1 and r["decode_only"]["mean_tokens"] == 4
    dev = r["device"]
    # busy: 1000-1250 (the overlap once), 1300-1350, 1500-1700, 1720-1750 = 530 of 800
    assert dev["busy_ms"] == pytest.approx(0.53) and dev["idle_ms"] == pytest.approx(0.27)
    assert dev["busy_share"] == pytest.approx(0.6625)
    cats = dev["by_category"]
    assert cats["gemm"]["ms"] == pytest.approx(0.35) and cats["attention"]["ms"] == pytest.approx(
        0.1
    )
    assert cats["communication"]["ms"] == pytest.approx(0.05)
    assert cats["memory"]["ms"] == pytest.approx(0.03)
    assert list(cats)[0] == "gemm"  # largest first
    assert dev["top_kernels"][0] == {
        "name": "void cutlass::device_kernel<gemm>",
        "category": "gemm",
        "ms": 0.35,
        "calls": 2,
    }


def test_summary_says_when_no_trace_was_written(tmp_path):
    d = tmp_path / "profile"
    d.mkdir()
    summary = summarize(d)
    assert summary["ranks"] == [] and "wrote no trace" in summary["error"]


def test_steps_are_timed_on_the_device_where_the_trace_mirrors_them(tmp_path):
    """With CUDA graphs and asynchronous scheduling the host's span of a step ends once its work
    is launched: the device's span (`gpu_user_annotation`) is the step's cost."""
    d = tmp_path / "profile"
    d.mkdir()
    name = "execute_context_0(0)_generation_8(8)"
    host = {"ph": "X", "cat": "user_annotation", "name": name, "pid": 1, "tid": 1}
    dev = {"ph": "X", "cat": "gpu_user_annotation", "name": name, "pid": 0, "tid": 7}
    kern = {"ph": "X", "cat": "kernel", "name": "nvjet_tst_gemm", "pid": 0, "tid": 7}
    events = [
        {**host, "ts": 0.0, "dur": 50.0},
        {**host, "ts": 100.0, "dur": 50.0},
        {**dev, "ts": 40.0, "dur": 1000.0},
        {**dev, "ts": 1040.0, "dur": 1000.0},
        {**kern, "ts": 40.0, "dur": 900.0},
        {**kern, "ts": 1040.0, "dur": 900.0},
    ]
    _write_trace(d / "rank0.2.pt.trace.json.gz", events)
    (r,) = summarize(d)["ranks"]
    assert r["step_spans"] == "device"
    assert r["all_steps"]["mean_ms"] == pytest.approx(1.0) and r["window_ms"] == pytest.approx(2.0)
    assert r["device"]["busy_share"] == pytest.approx(0.9)


def test_a_submission_run_is_never_profiled(tmp_path):
    from harness.run.setup.checks import check_sut_options
    from harness.run.setup.spec import RunSpec

    req = RunSpec(
        benchmark="llama3_1-8b",
        scenario="Offline",
        model=tmp_path,
        dataset=tmp_path / "d.json",
        output=tmp_path / "o",
        profile="10",
        submission=True,
    )
    with pytest.raises(UsageError, match="drop --profile or --submission"):
        check_sut_options(req)
