"""`run --ignore-eos --output-lengths COLUMN`: each sample's output as long as its row says, in
Offline (`vllm.LLM`) and Server (`AsyncLLM`, streaming), so a weights-free GPU run follows a
benchmark's output length profile. Lengths 2 (the least where LoadGen forms a TPOT) up to the
run's --max-tokens, each sample issued once (LoadGen's performance_issue_unique): the tokens the
SUT reports add up to the column's sum, which no fixed length gives.

The two runs share nothing, so a module fixture starts them side by side: an engine start is
three interpreters importing vLLM one after another (about 0.7 of a core), a few seconds of
generation each barely overlap, and nothing asserted here is a rate or a latency.

Time budget: 60 s: two engine starts of the tiny model side by side, a few seconds of
generation each.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import CliRun, cli, run_args

pytestmark = [pytest.mark.e2e, pytest.mark.untimed]

MAX_TOKENS = 24
CYCLE = [2, 3, 7, 24, 13, 2, 5, 19]


@pytest.fixture(scope="module")
def lengths_dataset(tiny_dataset, tmp_path_factory) -> tuple[Path, list[int]]:
    rows = json.loads(Path(tiny_dataset).read_text())
    lengths = [CYCLE[i % len(CYCLE)] for i in range(len(rows))]
    for row, n in zip(rows, lengths, strict=True):
        row["tok_output_len"] = n
    out = tmp_path_factory.mktemp("lengths") / "with_lengths.json"
    out.write_text(json.dumps(rows))
    return out, lengths


SCENARIOS = ("Offline", "Server")


def _run(tiny_model, data: Path, n: int, root: Path, scenario: str) -> CliRun:
    conf = root / "unique.conf"
    conf.write_text(
        f"*.{scenario}.min_duration = 0\n*.{scenario}.min_query_count = {n}\n"
        f"*.{scenario}.target_qps = 20\n*.{scenario}.performance_issue_unique = 1\n"
        f"*.*.performance_sample_count_override = {n}\n"
    )
    out = root / "run"
    args = run_args(
        tiny_model,
        data,
        out,
        conf,
        "--ignore-eos",
        "--max-tokens",
        str(MAX_TOKENS),
        "--output-lengths",
        "tok_output_len",
        scenario=scenario,
    )
    return CliRun(out, cli(*args))


@pytest.fixture(scope="module")
def runs(tiny_model, lengths_dataset, tmp_path_factory) -> dict[str, CliRun]:
    """One run per scenario, both started at once (see the module's docstring)."""
    data, lengths = lengths_dataset
    roots = {s: tmp_path_factory.mktemp(f"lengths-{s.lower()}") for s in SCENARIOS}
    with ThreadPoolExecutor(len(SCENARIOS)) as pool:
        started = {
            s: pool.submit(_run, tiny_model, data, len(lengths), roots[s], s) for s in SCENARIOS
        }
        return {s: f.result() for s, f in started.items()}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_each_output_is_as_long_as_its_row_says(runs, lengths_dataset, scenario):
    _, lengths = lengths_dataset
    n = len(lengths)
    out, proc = runs[scenario].out, runs[scenario].proc
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads((out / "result.json").read_text())
    stats = result["sut_stats"]
    assert stats["issued"] == stats["completed"] == n and stats["failed_samples"] == 0
    assert stats["output_tokens"] == sum(lengths) != n * MAX_TOKENS
    assert not [r for r in result["performance"]["invalid_reasons"] if "error" in r]
    assert result["sut_options"]["output_lengths"] == "tok_output_len"
    assert result["sut_options"]["output_lengths_mean"] == pytest.approx(sum(lengths) / n, abs=0.01)
    assert any("output lengths from column 'tok_output_len'" in w for w in result["warnings"])
