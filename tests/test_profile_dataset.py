"""bench/profile_dataset.py: a weights-free run's dataset with a benchmark's length profile,
read back by the run's own dataset loader and its --output-lengths check."""

from __future__ import annotations

import json
from pathlib import Path

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


MODEL_405B = Path(__file__).resolve().parents[1] / "bench" / "models" / "llama31_405b_16l"


@pytest.fixture(scope="module")
def mix(tmp_path_factory) -> tuple[Path, Path]:
    """The 405B mix's profile with targets, and a tokenizer of the 405B's vocabulary."""
    out = tmp_path_factory.mktemp("mix")
    data, tok = out / "mix.json", out / "tok"
    assert pd_.main(["--profile", "longmix", "--model", str(MODEL_405B), "--out", str(data),
                     "--samples", "30", "--targets", "--tokenizer-out", str(tok)]) == 0  # fmt: skip
    return data, tok


def test_405b_mix_profile_lengths(tmp_path):
    import numpy as np

    ins = pd_.draw_lengths(np.random.default_rng(5), 8313, pd_.PROFILES["longmix"].inputs)
    outs = pd_.draw_lengths(np.random.default_rng(6), 8313, pd_.PROFILES["longmix"].outputs)
    assert max(ins) == 20000 and min(ins) >= 100  # the mix's longest prompts, clipped there
    assert sum(ins) / len(ins) == pytest.approx(9400, abs=1)
    assert sum(outs) / len(outs) == pytest.approx(684.68, abs=0.05) and max(outs) <= 2000
    assert min(outs) == 2  # a Server run's TPOT needs two tokens: `run` refuses a one-token row
    # --input-max / --input-mean: a CPU dry run's short prompts from the same profile
    small = tmp_path / "small.json"
    pd_.main(["--profile", "longmix", "--model", str(MODEL_405B), "--out", str(small),
              "--samples", "50", "--input-mean", "200", "--input-max", "400"])  # fmt: skip
    lens = [len(r["tok_input"]) for r in json.loads(small.read_text())]
    assert max(lens) <= 400 and sum(lens) / len(lens) == pytest.approx(200, abs=0.5)


def test_405b_mix_targets_through_loader_and_evaluate(mix, nltk_root, tmp_path):
    """A weights-free 405B run's accuracy log goes through evaluate's per-row routing: rows of
    each kind are scored by their own metric and pooled into rougeL / exact_match."""
    import numpy as np
    from transformers import AutoTokenizer

    from evaluation import evaluate

    data_path, tok_dir = mix
    bench = get_benchmark("llama3_1-405b")
    data = load_dataset(data_path, bench, need_targets=True)
    frame = data.frame
    assert list(frame["metric"][:3]) == ["rouge", "niah_em", "qa_em"]
    tok = AutoTokenizer.from_pretrained(str(tok_dir), local_files_only=True)
    assert len(tok) == 128256  # the config's vocabulary, id for id
    entries = []
    qa_rows = [i for i, k in enumerate(frame["metric"]) if k == "qa_em"]
    for i, (kind, label) in enumerate(zip(frame["metric"], frame["gt_output"], strict=True)):
        if kind == "rouge":  # the label itself: rougeL 100
            ids = tok.encode(label, add_special_tokens=False)
        elif kind == "qa_em" and qa_rows.index(i) % 2 == 0:  # the first alternative: a match
            ids = tok.encode(label.split("|")[0], add_special_tokens=False)
        else:  # no UUID, no alternative: 0
            ids = tok.encode("t999 t998", add_special_tokens=False)
        ids = [*ids, 128009]  # the EOS, skipped when decoding
        hexed = np.asarray(ids, "<i4").tobytes().hex().upper()
        entries.append({"seq_id": i, "qsl_idx": i, "data": hexed, "token_count": len(ids)})
    log = tmp_path / "mlperf_log_accuracy.json"
    log.write_text(json.dumps(entries))
    result = evaluate("llama3_1-405b", log, frame, tok_dir, nltk_data=nltk_root)
    assert result.metrics["rougeL"] == pytest.approx(100.0)
    assert result.metrics["exact_match"] == pytest.approx(5 * 100 / 20)  # 5 of 10 qa, 0 of 10 niah
    doc = json.loads(result.paths.accuracy_json.read_text())
    assert doc["rows_per_metric"] == {"rougeL": 10, "exact_match": 20}
    # The same log read with a smaller vocabulary: refused, not scored as empty text
    small = tmp_path / "small"
    pd_.write_vocab_tokenizer({"vocab_size": 1000, "eos_token_id": 2}, small)
    from evaluation import EvaluationError

    with pytest.raises(EvaluationError, match="outside the tokenizer's vocabulary of 1000"):
        evaluate("llama3_1-405b", log, frame, small, nltk_data=nltk_root)


def test_parquet_holds_the_json_rows(mix, tmp_path):
    """--out *.parquet (the full 405B mix, ~78M prompt tokens) writes the same rows."""
    data_path, _ = mix
    pq = tmp_path / "mix.parquet"
    assert pd_.main(["--profile", "longmix", "--model", str(MODEL_405B), "--out", str(pq),
                     "--samples", "30", "--targets"]) == 0  # fmt: skip
    bench = get_benchmark("llama3_1-405b")
    a, b = load_dataset(data_path, bench, need_targets=True), load_dataset(pq, bench)
    assert a.prompts == b.prompts and a.input_lengths() == b.input_lengths()
    cols = ["tok_output_len", "gt_output", "metric"]
    assert a.frame[cols].to_dict("records") == b.frame[cols].to_dict("records")
