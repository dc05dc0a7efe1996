"""Bad input: one clear line naming the problem and the fix, exit code 2, before any engine
starts (these tests finish in seconds because no engine is ever built)."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pandas as pd
import pytest

from harness.cli import main
from tests.conftest import SMOKE


def run_cli(capsys, *args: str) -> tuple[int, str]:
    code = main(list(args))
    err = capsys.readouterr().err.strip()
    return code, err


def offline_args(model: Path, dataset: Path, out: Path, *extra: str) -> list[str]:
    return [
        "run",
        "--benchmark",
        "llama3_1-8b",
        "--scenario",
        "Offline",
        "--mode",
        "performance",
        "--model",
        str(model),
        "--dataset",
        str(dataset),
        "--output",
        str(out),
        "--user-conf",
        str(SMOKE / "offline.conf"),
        "--no-mlflow",
        *extra,
    ]


def write_records(path: Path, rows) -> Path:
    path.write_text(json.dumps(rows))
    return path


@pytest.fixture
def good_rows(tiny_dataset):
    return json.loads(Path(tiny_dataset).read_text())


def assert_one_clear_line(code: int, err: str, *needles: str) -> None:
    assert code == 2, err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ")
    for n in needles:
        assert n in lines[0], lines[0]


def test_missing_dataset_file(capsys, tiny_model, tmp_path):
    code, err = run_cli(capsys, *offline_args(tiny_model, tmp_path / "nope.json", tmp_path / "o"))
    assert_one_clear_line(code, err, "does not exist", "--dataset")


def test_wrong_format(capsys, tiny_model, tmp_path):
    bad = tmp_path / "data.csv"
    bad.write_text("a,b\n1,2\n")
    code, err = run_cli(capsys, *offline_args(tiny_model, bad, tmp_path / "o"))
    assert_one_clear_line(code, err, "unknown format .csv")


def test_truncated_json(capsys, tiny_model, tiny_dataset, tmp_path):
    bad = tmp_path / "trunc.json"
    bad.write_text(Path(tiny_dataset).read_text()[:500])
    code, err = run_cli(capsys, *offline_args(tiny_model, bad, tmp_path / "o"))
    assert_one_clear_line(code, err, "could not be read as json")


def test_missing_column(capsys, tiny_model, good_rows, tmp_path):
    rows = [{k: v for k, v in r.items() if k != "tok_input"} for r in good_rows]
    code, err = run_cli(
        capsys, *offline_args(tiny_model, write_records(tmp_path / "d.json", rows), tmp_path / "o")
    )
    assert_one_clear_line(code, err, "lacks column(s) 'tok_input'")


def test_missing_target_column_in_accuracy_mode(capsys, tiny_model, good_rows, tmp_path):
    rows = [{k: v for k, v in r.items() if k != "output"} for r in good_rows]
    args = offline_args(tiny_model, write_records(tmp_path / "d.json", rows), tmp_path / "o")
    args[args.index("performance")] = "accuracy"
    code, err = run_cli(capsys, *args)
    assert_one_clear_line(code, err, "'output'")


def test_accuracy_run_without_punkt_stops_before_the_engine(
    capsys, tiny_model, tiny_dataset, tmp_path
):
    """Scoring runs after the whole accuracy run: missing NLTK data must stop it up front."""
    empty = tmp_path / "no-nltk"
    empty.mkdir()
    out = tmp_path / "o"
    args = offline_args(tiny_model, tiny_dataset, out, "--nltk-data", str(empty))
    args[args.index("performance")] = "both"
    code, err = run_cli(capsys, *args)
    assert_one_clear_line(code, err, "punkt_tab", str(empty), "--no-evaluate")
    assert not (out / "performance").exists() and not (out / "accuracy").exists()


def test_empty_dataset(capsys, tiny_model, tmp_path):
    code, err = run_cli(
        capsys, *offline_args(tiny_model, write_records(tmp_path / "e.json", []), tmp_path / "o")
    )
    assert_one_clear_line(code, err, "is empty")


def test_non_integer_token_ids(capsys, tiny_model, good_rows, tmp_path):
    good_rows[3]["tok_input"] = [1.5, 2.25, 3.0]
    code, err = run_cli(
        capsys,
        *offline_args(tiny_model, write_records(tmp_path / "d.json", good_rows), tmp_path / "o"),
    )
    assert_one_clear_line(code, err, "row 3", "non-integer")


def test_text_instead_of_token_ids(capsys, tiny_model, good_rows, tmp_path):
    good_rows[0]["tok_input"] = "Summarize this"
    code, err = run_cli(
        capsys,
        *offline_args(tiny_model, write_records(tmp_path / "d.json", good_rows), tmp_path / "o"),
    )
    assert_one_clear_line(code, err, "row 0", "holds text")


def test_out_of_vocab_token_ids(capsys, tiny_model, good_rows, tmp_path):
    good_rows[5]["tok_input"] = good_rows[5]["tok_input"] + [128000]
    code, err = run_cli(
        capsys,
        *offline_args(tiny_model, write_records(tmp_path / "d.json", good_rows), tmp_path / "o"),
    )
    assert_one_clear_line(code, err, "128000", "row 5", "tokenizer/model mismatch")


def test_prompt_longer_than_max_model_len(capsys, tiny_model, good_rows, tmp_path):
    code, err = run_cli(
        capsys,
        *offline_args(
            tiny_model,
            write_records(tmp_path / "d.json", good_rows),
            tmp_path / "o",
            "--engine-arg",
            "max_model_len=64",
        ),
    )
    assert_one_clear_line(code, err, "max_model_len 64", "--max-model-len")


def test_tokenizer_model_mismatch(capsys, tiny_model, tiny_dataset, tmp_path):
    import shutil

    other = tmp_path / "model"
    shutil.copytree(tiny_model, other)
    cfg = json.loads((other / "config.json").read_text())
    cfg["vocab_size"] = 300  # the tokenizer has more tokens than this model's embedding
    (other / "config.json").write_text(json.dumps(cfg))
    code, err = run_cli(capsys, *offline_args(other, tiny_dataset, tmp_path / "o"))
    assert_one_clear_line(code, err, "tokenizer", "another model")


def test_pickle_needs_explicit_opt_in(capsys, tiny_model, good_rows, tmp_path):
    pkl = tmp_path / "d.pkl"
    pd.DataFrame(good_rows).to_pickle(pkl)
    code, err = run_cli(capsys, *offline_args(tiny_model, pkl, tmp_path / "o"))
    assert_one_clear_line(code, err, "--allow-pickle")


def test_pickle_of_non_table(capsys, tiny_model, tmp_path):
    pkl = tmp_path / "d.pkl"
    pkl.write_bytes(pickle.dumps([1, 2, 3]))
    code, err = run_cli(capsys, *offline_args(tiny_model, pkl, tmp_path / "o", "--allow-pickle"))
    assert_one_clear_line(code, err, "not a table")


def test_parquet_and_jsonl_load(tiny_model, good_rows, tmp_path):
    from harness.benchmarks import get_benchmark
    from harness.datasets import load_dataset

    bench = get_benchmark("llama3_1-8b")
    frame = pd.DataFrame(good_rows)
    frame.to_parquet(tmp_path / "d.parquet")
    frame.to_json(tmp_path / "d.jsonl", orient="records", lines=True)
    a = load_dataset(tmp_path / "d.parquet", bench)
    b = load_dataset(tmp_path / "d.jsonl", bench)
    assert a.prompts == b.prompts == [r["tok_input"] for r in good_rows]


def test_missing_user_conf_and_audit_config(capsys, tiny_model, tiny_dataset, tmp_path):
    args = offline_args(tiny_model, tiny_dataset, tmp_path / "o")
    args[args.index("--user-conf") + 1] = str(tmp_path / "user.conf")
    code, err = run_cli(capsys, *args)
    assert_one_clear_line(code, err, "user.conf", "does not exist")
    code, err = run_cli(
        capsys,
        *offline_args(
            tiny_model,
            tiny_dataset,
            tmp_path / "o",
            "--audit-config",
            str(tmp_path / "audit.config"),
        ),
    )
    assert_one_clear_line(code, err, "audit config", "does not exist")
    # --test06 runs its own audited test after the run's: an audit config for every test too
    # is a contradiction, refused before anything is written
    audit = tmp_path / "audit.config"
    audit.write_text("*.*.mode = 2\n")
    code, err = run_cli(
        capsys,
        *offline_args(
            tiny_model, tiny_dataset, tmp_path / "o2", "--test06", "--audit-config", str(audit)
        ),
    )
    assert_one_clear_line(code, err, "--test06", "--audit-config", "pass one of them")
    assert not (tmp_path / "o2").exists()


def test_unknown_benchmark_and_engine_flag(capsys, tiny_model, tiny_dataset, tmp_path):
    args = offline_args(tiny_model, tiny_dataset, tmp_path / "o")
    args[args.index("llama3_1-8b")] = "llama9"
    code, err = run_cli(capsys, *args)
    assert_one_clear_line(code, err, "unknown benchmark 'llama9'")
    code, err = run_cli(
        capsys,
        *offline_args(
            tiny_model, tiny_dataset, tmp_path / "o", "--engine-arg", "max_num_sequences=4"
        ),
    )
    assert_one_clear_line(code, err, "max_num_sequences")


@pytest.mark.parametrize(
    "extra, needles",
    [
        (["--price-per-hour", "-1"], ["--price-per-hour must be a positive"]),
        (["--warmup-samples", "-3"], ["--warmup-samples must be 0 or more"]),
    ],
)
def test_bad_sut_options(capsys, tiny_model, tiny_dataset, tmp_path, extra, needles):
    code, err = run_cli(capsys, *offline_args(tiny_model, tiny_dataset, tmp_path / "o", *extra))
    assert_one_clear_line(code, err, *needles)


def test_offline_order_only_for_offline(capsys, tiny_model, tiny_dataset, tmp_path):
    args = offline_args(
        tiny_model, tiny_dataset, tmp_path / "o", "--offline-order", "longest-first"
    )
    args[args.index("Offline")] = "Server"
    args[args.index(str(SMOKE / "offline.conf"))] = str(SMOKE / "server.conf")
    code, err = run_cli(capsys, *args)
    assert_one_clear_line(code, err, "--offline-order applies to Offline", "for Server")


@pytest.mark.parametrize(
    "extra, needles",
    [
        (["--output-lengths", "n"], ["--output-lengths", "add --ignore-eos"]),
        (
            ["--output-lengths", "n", "--ignore-eos", "--mode", "accuracy"],
            ["cannot be scored nor audited", "--mode performance alone"],
        ),
        (
            ["--output-lengths", "n", "--ignore-eos", "--test06"],
            ["cannot be scored nor audited"],
        ),
    ],
)
def test_output_lengths_only_for_weights_free_performance_runs(
    capsys, tiny_model, tiny_dataset, tmp_path, extra, needles
):
    out = tmp_path / "o"
    code, err = run_cli(capsys, *offline_args(tiny_model, tiny_dataset, out, *extra))
    assert_one_clear_line(code, err, *needles)
    assert not out.exists()


@pytest.mark.parametrize(
    "column, needles",
    [
        ("absent", ["no column 'absent' for --output-lengths", "tok_input"]),
        ("half", ["column 'half' row 1 is 2.5", "not a whole number"]),
        ("text", ["column 'text' row 0 is 'x'", "one integer per sample"]),
        ("zero", ["column 'zero' row 2 asks for 0 output tokens", "outside 1..128"]),
        ("long", ["column 'long' row 3 asks for 129 output tokens", "raise --max-tokens"]),
        ("one", ["column 'one' row 4 asks for 1 output tokens", "LoadGen needs 2 for a TPOT"]),
    ],
)
def test_bad_output_length_columns(capsys, tiny_model, good_rows, tmp_path, column, needles):
    n = len(good_rows)
    columns = {
        "half": [1.0, 2.5] + [3.0] * (n - 2),
        "text": ["x"] * n,
        "zero": [5, 5, 0] + [5] * (n - 3),
        "long": [5, 5, 5, 129] + [5] * (n - 4),
        "one": [5, 5, 5, 5, 1] + [5] * (n - 5),
    }
    rows = [{**r, **{k: v[i] for k, v in columns.items()}} for i, r in enumerate(good_rows)]
    data = write_records(tmp_path / "lengths.json", rows)
    out = tmp_path / "o"
    args = offline_args(tiny_model, data, out, "--ignore-eos", "--output-lengths", column)
    if column == "one":  # one-token outputs are refused where LoadGen forms a TPOT
        args[args.index("Offline")] = "Server"
        args[args.index(str(SMOKE / "offline.conf"))] = str(SMOKE / "server.conf")
    code, err = run_cli(capsys, *args)
    assert_one_clear_line(code, err, *needles)
    assert not out.exists()
