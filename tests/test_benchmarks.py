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


# Files that may name a benchmark as a string, and why: each names presets, it keeps no facts.
NAME_ALLOW_LIST = {
    "harness/submission/rounds.py": "which presets each submission round accepts",
    "harness/cli/demo.py": "the one preset the demo runs",
    "harness/cli/assets.py": "make-dataset's default --benchmark",
    "bench/offline_overhead.py": "the preset a benchmark script measures",
    "bench/server_capacity.py": "the preset a benchmark script measures",
    "bench/server_vs_raw.py": "the preset a benchmark script measures",
    "bench/host_path.py": "the preset a benchmark script measures",
}


def _registry_names() -> set[str]:
    names = set()
    for b in BENCHMARKS.values():
        names |= {b.name, b.loadgen_model, b.accuracy_preset, *b.accuracy.checker_models.values()}
    return names


def test_no_other_table_of_model_names_exists():
    """Every benchmark fact derives from the registry: outside harness/benchmarks.py no source
    file spells a benchmark's name (ours, LoadGen's or the checker's) as a string of its own,
    but for the allow-list above; help texts and docstrings mention names inside longer text."""
    import ast
    from pathlib import Path

    repo = Path(__file__).resolve().parent.parent
    names = _registry_names()
    found: dict[str, list[str]] = {}
    for folder in ("sut", "harness", "evaluation", "bench"):
        for path in sorted((repo / folder).rglob("*.py")):
            rel = path.relative_to(repo).as_posix()
            if rel == "harness/benchmarks.py" or "__pycache__" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text(), rel)):
                if isinstance(node, ast.Constant) and node.value in names:
                    found.setdefault(rel, []).append(f"{rel}:{node.lineno} {node.value!r}")
    unexpected = [hit for rel, hits in found.items() if rel not in NAME_ALLOW_LIST for hit in hits]
    assert not unexpected, "benchmark names outside the registry: " + "; ".join(unexpected)
    assert len(found.get("harness/cli/demo.py", [])) <= 1  # one constant, not a table


def test_accuracy_facts_come_from_the_registry():
    from evaluation.targets import known_benchmarks, targets_for
    from harness.submission.rounds import ROUNDS

    assert known_benchmarks() == tuple(BENCHMARKS)
    for b in BENCHMARKS.values():
        for level, checker_model in b.accuracy.checker_models.items():
            assert targets_for(b.name, level).checker_model == checker_model
    for r in ROUNDS:
        for m in r.models:
            assert m.folder == BENCHMARKS[m.preset].accuracy.checker_models[m.accuracy_level]
