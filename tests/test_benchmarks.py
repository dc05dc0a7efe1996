import pytest

from harness.benchmarks import BENCHMARKS, get_benchmark, resolve


def test_registry_holds_every_preset_with_loadgen_facts():
    assert set(BENCHMARKS) == {
        "llama3_1-8b",
        "llama3_1-8b-edge",
        "llama3_1-8b-interactive",
        "llama2-70b",
        "llama2-70b-interactive",
        "llama3_1-405b",
        "llama3_1-405b-interactive",
    }
    assert get_benchmark("llama3_1-8b").total_sample_count == 13368
    assert get_benchmark("llama3_1-8b-edge").performance_sample_count == 5000
    assert get_benchmark("llama2-70b").sampling.max_tokens == 1024
    assert get_benchmark("llama3_1-405b").sampling.max_tokens == 2000
    assert get_benchmark("llama3_1-405b").schema.target_column == "gt_output"
    assert get_benchmark("llama2-70b").schema.official_format == "pickle"
    for b in BENCHMARKS.values():
        assert b.sampling.is_greedy() and b.sampling.min_tokens == 1
        assert b.name == b.loadgen_model


@pytest.mark.parametrize(
    "name,ttft,tpot",
    [
        ("llama3_1-8b", 2000, 100),
        ("llama3_1-8b-interactive", 500, 30),
        ("llama2-70b", 2000, 200),
        ("llama2-70b-interactive", 450, 40),
        ("llama3_1-405b", 6000, 175),
        ("llama3_1-405b-interactive", 4500, 80),
    ],
)
def test_server_limits_match_mlperf_conf(name, ttft, tpot):
    lim = get_benchmark(name).server_limits
    assert (lim.ttft_ms, lim.tpot_ms) == (ttft, tpot)


def test_interactive_scenario_maps_to_interactive_loadgen_name():
    bench, lg_name = resolve("llama2-70b", "Interactive")
    assert lg_name == "llama2-70b-interactive" and bench.server_limits.ttft_ms == 450
    assert resolve("llama3_1-8b", "Offline")[1] == "llama3_1-8b"


def test_unknown_benchmark_and_unsupported_scenario_are_clear():
    with pytest.raises(KeyError, match="choose one of"):
        get_benchmark("llama4")
    with pytest.raises(ValueError, match="no SingleStream scenario"):
        resolve("llama2-70b", "SingleStream")
    with pytest.raises(ValueError, match="no Offline"):
        resolve("llama3_1-8b-interactive", "Offline")
