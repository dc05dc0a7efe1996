"""`run --ignore-eos --output-lengths COLUMN`: each sample's output as long as its row says, in
Offline (`vllm.LLM`) and Server (`AsyncLLM`, streaming), so a weights-free GPU run follows a
benchmark's output length profile. Lengths 2 (the least where LoadGen forms a TPOT) up to the
run's --max-tokens, each sample issued once (LoadGen's performance_issue_unique): the tokens the
SUT reports add up to the column's sum, which no fixed length gives.

Time budget: 90 s: two engine starts of the tiny model, a few seconds of generation each.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import cli, run_args

pytestmark = pytest.mark.e2e

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


@pytest.mark.parametrize("scenario", ["Offline", "Server"])
def test_each_output_is_as_long_as_its_row_says(tiny_model, lengths_dataset, tmp_path, scenario):
    data, lengths = lengths_dataset
    n = len(lengths)
    conf = tmp_path / "unique.conf"
    conf.write_text(
        f"*.{scenario}.min_duration = 0\n*.{scenario}.min_query_count = {n}\n"
        f"*.{scenario}.target_qps = 20\n*.{scenario}.performance_issue_unique = 1\n"
        f"*.*.performance_sample_count_override = {n}\n"
    )
    out = tmp_path / "run"
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
    proc = cli(*args)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads((out / "result.json").read_text())
    stats = result["sut_stats"]
    assert stats["issued"] == stats["completed"] == n and stats["failed_samples"] == 0
    assert stats["output_tokens"] == sum(lengths) != n * MAX_TOKENS
    assert not [r for r in result["performance"]["invalid_reasons"] if "error" in r]
    assert result["sut_options"]["output_lengths"] == "tok_output_len"
    assert result["sut_options"]["output_lengths_mean"] == pytest.approx(sum(lengths) / n, abs=0.01)
    assert any("output lengths from column 'tok_output_len'" in w for w in result["warnings"])
