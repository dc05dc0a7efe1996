"""bench/profile_dataset.py: a weights-free run's dataset with a benchmark's length profile,
read back by the run's own dataset loader and its --output-lengths check."""

from __future__ import annotations

import json

import pytest

from bench import profile_dataset as pd_
from harness.benchmarks import get_benchmark
from harness.datasets import load_dataset, output_lengths


def test_clipped_lengths_keep_the_target_mean():
    import numpy as np

    spec = pd_.Lengths(294.45, 2, 1024, 1.5)
    got = pd_.draw_lengths(np.random.default_rng(1), 5000, spec)
    assert min(got) >= 2 and max(got) == 1024  # the tail reaches the cap and is clipped there
    assert sum(got) / len(got) == pytest.approx(294.45, abs=0.05)
    assert len(set(got)) > 300  # a spread, not one length
    with pytest.raises(ValueError, match="outside"):
        pd_.draw_lengths(np.random.default_rng(1), 10, pd_.Lengths(3000, 2, 1024))


def test_70b_profile_through_the_run_loader(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"vocab_size": 32000}))
    out = tmp_path / "d.json"
    assert pd_.main(["--profile", "openorca", "--model", str(model), "--out", str(out),
                     "--samples", "3000"]) == 0  # fmt: skip
    again = tmp_path / "again.json"
    pd_.main(["--profile", "openorca", "--model", str(model), "--out", str(again),
              "--samples", "3000"])  # fmt: skip
    assert again.read_bytes() == out.read_bytes()  # one seed, one file
    bench = get_benchmark("llama2-70b")
    data = load_dataset(out, bench)
    lengths = output_lengths(data, "tok_output_len", bench.sampling.max_tokens, least=2)
    assert sum(lengths) / len(lengths) == pytest.approx(294.45, abs=0.05)
    inputs = data.input_lengths()
    assert sum(inputs) / len(inputs) == pytest.approx(308, abs=0.05)
    assert min(inputs) >= 100 and max(inputs) <= 1024
    assert max(max(p) for p in data.prompts) < 30000
