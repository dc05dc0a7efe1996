"""`--engine-line LINES`: the measured engine line for the benchmark and scenario, applied by run
and calibrate as if typed first. The shipped H200 lines (user_confs/engines/h200/*.toml) are read
as a user would; a user's own conf with `# engine` lines, written here, stays supported; the
command line is parsed by the real CLI parser; bad lines are refused before anything runs.
(test_server_e2e's shared Server run takes its warm-up and engine stats from a conf line.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import build_parser
from harness.cli.engine_line import expand, line_flags
from harness.errors import UsageError

REPO = Path(__file__).resolve().parents[1]
ENGINES = REPO / "user_confs" / "engines"
H200 = ENGINES / "h200"
BASE = ["--benchmark", "llama3_1-8b", "--model", "m", "--dataset", "d.json", "--output", "o"]


def test_the_h200_lines_have_one_line_per_scenario_with_its_policy() -> None:
    off = line_flags(H200, "llama3_1-8b", "Offline")
    server = line_flags(H200, "llama3_1-8b", "Server")
    inter = line_flags(H200, "llama3_1-8b", "Interactive")
    assert "max_num_batched_tokens=65536" in off and "--prefill-policy" not in off
    assert server[server.index("--prefill-policy") + 1] == "0x4"
    assert inter[inter.index("--prefill-policy") + 1] == "4096x4@250"
    assert "max_num_batched_tokens=8192" in inter
    # the quoted JSON value stays one argument
    assert 'compilation_config={"max_cudagraph_capture_size":2048}' in inter


def test_line_flags_come_first_so_typed_flags_win() -> None:
    argv = ["run", "--engine-line", str(H200), "--scenario", "Server", *BASE]
    argv += ["--prefill-policy", "0", "--engine-arg", "max_num_seqs=256"]
    expanded, note = expand(argv, "run", "llama3_1-8b", "Server", str(H200))
    assert "--engine-line" not in expanded and expanded[0] == "run"
    assert note.startswith("engine line llama3_1-8b.Server from") and "0x4" in note
    args, extra = build_parser().parse_known_args(expanded)
    assert args.command == "run" and not extra
    assert args.prefill_policy == "0"  # typed after the line's 0x4
    assert args.engine_args[:4] == [
        "quantization=fp8",
        "kv_cache_dtype=fp8",
        "max_num_seqs=512",
        "max_num_batched_tokens=65536",
    ]
    assert args.engine_args[-1] == "max_num_seqs=256"  # vLLM's parser keeps the last


def test_a_typed_engine_flag_beats_the_lines_pair_for_the_same_key() -> None:
    """`--max-num-seqs 8` typed beside a line that holds `--engine-arg max_num_seqs=512`: the
    line's pair would reach the engine after vLLM's flags and win; it is left out, and said."""
    argv = ["run", "--engine-line", str(H200), "--scenario", "Server", *BASE]
    argv += ["--max-num-seqs", "8", "--no-enable-prefix-caching"]
    expanded, note = expand(argv, "run", "llama3_1-8b", "Server", str(H200))
    assert "max_num_seqs=512" not in expanded and expanded[-3:-1] == ["--max-num-seqs", "8"]
    assert "kv_cache_dtype=fp8" in expanded  # the line's other pairs stay
    assert note.endswith("(left out, typed on the command line: max_num_seqs=512)"), note
    args, _ = build_parser().parse_known_args(expanded)
    assert not any(a.startswith("max_num_seqs=") for a in args.engine_args)


def test_calibrate_passes_the_line_on_to_its_runs() -> None:
    argv = ["--debug", "calibrate", f"--engine-line={H200}", "--scenario", "Interactive", *BASE]
    expanded, _ = expand(argv, "calibrate", "llama3_1-8b", "Interactive", str(H200))
    assert expanded[:2] == ["--debug", "calibrate"]
    args, extra = build_parser().parse_known_args(expanded)
    assert args.command == "calibrate"
    assert "--prefill-policy" in extra and "4096x4@250" in extra  # run flags: each run gets them


def test_a_users_conf_line_applies_as_a_toml_line_does(tmp_path: Path) -> None:
    """The conf-line form stays: a user's conf keeps its line as a `# engine` comment, the
    flags before the first ` | ` (the quoted JSON value stays one argument)."""
    conf = tmp_path / "mine.conf"
    conf.write_text(
        "llama3_1-8b.Server.target_qps = 50\n"
        "# engine llama3_1-8b.Offline: --engine-arg max_num_seqs=8 | not this scenario's | -\n"
        "# engine llama3_1-8b.Server: --engine-arg max_num_seqs=512 --engine-arg "
        "'compilation_config={\"max_cudagraph_capture_size\":2048}' --prefill-policy 0x4 "
        "| 50 QPS | bench/gpu.sh\n"
    )
    assert line_flags(conf, "llama3_1-8b", "Server") == [
        "--engine-arg",
        "max_num_seqs=512",
        "--engine-arg",
        'compilation_config={"max_cudagraph_capture_size":2048}',
        "--prefill-policy",
        "0x4",
    ]
    argv = ["run", "--engine-line", str(conf), "--scenario", "Server", *BASE, "--engine-stats"]
    expanded, note = expand(argv, "run", "llama3_1-8b", "Server", str(conf))
    assert note.startswith(f"engine line llama3_1-8b.Server from {conf}")
    args, extra = build_parser().parse_known_args(expanded)
    assert args.prefill_policy == "0x4" and args.engine_stats and not extra


def test_the_shipped_folder_resolves_from_any_folder(tmp_path, monkeypatch) -> None:
    """`--engine-line user_confs/engines/h200` as README spells it, from outside the source
    tree: found among the shipped files, as `--user-conf user_confs/...` is."""
    from harness.resources import resolve_user_path

    monkeypatch.chdir(tmp_path)
    spelled = "user_confs/engines/h200"
    assert not Path(spelled).exists()
    assert resolve_user_path(Path(spelled)) == H200
    argv = ["run", "--engine-line", spelled, "--scenario", "Offline", *BASE]
    expanded, note = expand(argv, "run", "llama3_1-8b", "Offline", spelled)
    assert "max_num_batched_tokens=65536" in note and "--engine-line" not in expanded
    one = f"{spelled}/llama3_1-8b.Offline.toml"
    assert resolve_user_path(Path(one)) == H200 / "llama3_1-8b.Offline.toml"
    assert resolve_user_path(Path("user_confs/engines/h300")) == Path("user_confs/engines/h300")


def test_no_engine_line_leaves_argv_alone() -> None:
    argv = ["run", "--scenario", "Server", *BASE]
    assert expand(argv, "run", "llama3_1-8b", "Server", None) == (argv, "")


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (
            "# engine llama3_1-8b.Offline: --engine-arg max_num_seqs=8 | x\n",
            "it holds: llama3_1-8b.Offline",
        ),
        (
            "# engine llama3_1-8b.Server: --engine-stats | a\n"
            "# engine llama3_1-8b.Server: --engine-arg max_num_seqs=8 | b\n",
            "2 lines for llama3_1-8b.Server",
        ),
        ("# engine llama3_1-8b.Server: --model /other | x\n", "sets --model"),
        ("# engine llama3_1-8b.Server: --user-conf=o.conf | x\n", "sets --user-conf"),
        ("# engine llama3_1-8b.Server: max_num_seqs=8 | x\n", "not a --flag"),
        ("# engine llama3_1-8b.Server: --engine-arg 'a=1 | x\n", "llama3_1-8b.Server line"),
    ],
)
def test_bad_confs_are_refused_naming_the_problem(tmp_path: Path, text: str, words: str) -> None:
    conf = tmp_path / "lines.conf"
    conf.write_text(text)
    with pytest.raises(UsageError, match="--engine-line") as err:
        line_flags(conf, "llama3_1-8b", "Server")
    assert words in str(err.value)


def _cli(command: str, conf: Path, scenario: str, tmp_path: Path, out: Path):
    argv = [command, "--engine-line", str(conf), "--scenario", scenario, "--benchmark"]
    argv += ["llama3_1-8b", "--model", str(tmp_path), "--dataset", str(tmp_path / "d.json")]
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *argv, "--output", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(REPO),
        check=False,
    )


def test_cli_refuses_a_missing_line_before_anything_runs(tmp_path: Path) -> None:
    out = tmp_path / "out"
    conf = tmp_path / "lines.conf"
    conf.write_text("# engine llama3_1-8b.Offline: --engine-arg max_num_seqs=8 | x\n")
    proc = _cli("run", conf, "Interactive", tmp_path, out)
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: --engine-line"), proc.stderr
    assert "no `# engine llama3_1-8b.Interactive:` line" in lines[0]
    assert not out.exists()
    missing = _cli("calibrate", tmp_path / "no", "Server", tmp_path, out)
    assert missing.returncode == 2 and "cannot read it" in missing.stderr, missing.stderr
    assert not out.exists()


def test_a_folder_of_toml_lines_applies_the_pairs_first_so_typed_flags_win() -> None:
    h200 = ENGINES / "h200"
    argv = ["run", "--engine-line", str(h200), "--scenario", "Server", *BASE]
    argv += ["--prefill-policy", "0"]
    expanded, note = expand(argv, "run", "llama3_1-8b", "Server", str(h200))
    assert "0x4" in note
    args, extra = build_parser().parse_known_args(expanded)
    assert args.prefill_policy == "0" and not extra  # typed after the line's 0x4
    with pytest.raises(UsageError, match=r"no llama3_1-8b\.SingleStream\.toml \(it holds: "):
        line_flags(h200, "llama3_1-8b", "SingleStream")


@pytest.mark.parametrize(
    "run, words",
    [
        ("warmup_sample = 3", "'warmup_sample' is not a run option a line may set (did you mean"),
        ('model = "/other"', "'model' is not a run option a line may set"),
        ('mode = "accuracy"', "sets --mode"),
        ("warmup_samples = 3\nengine_stats = true", None),
        ('warmup_samples = "lots"', "warmup_samples=lots: give a whole number"),
        ('engine_args = "max_num_seqs=8"', "engine_args: give a list of strings"),
        ('engine_flags = ["--dataset", "d2"]', "sets --dataset"),
    ],
)
def test_a_toml_line_is_checked_as_run_options(tmp_path: Path, run: str, words: str | None):
    path = tmp_path / "line.toml"
    path.write_text(f'benchmark = "llama3_1-8b"\nscenario = "Server"\n[run]\n{run}\n')
    if words is None:
        assert line_flags(path, "llama3_1-8b", "Server") == [
            "--warmup-samples",
            "3",
            "--engine-stats",
        ]
        return
    with pytest.raises(UsageError, match="--engine-line") as err:
        line_flags(path, "llama3_1-8b", "Server")
    assert words in str(err.value)


def test_a_toml_line_for_another_test_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "line.toml"
    path.write_text('benchmark = "llama3_1-8b"\nscenario = "Offline"\n[evidence]\nfigure = "x"\n')
    with pytest.raises(UsageError, match=r"is for llama3_1-8b\.Offline, not llama3_1-8b\.Server"):
        line_flags(path, "llama3_1-8b", "Server")
    path.write_text('benchmark = "llama3_1-8b"\nscenario = "Server"\nfigure = "x"\n')
    with pytest.raises(UsageError, match="unknown key 'figure'"):
        line_flags(path, "llama3_1-8b", "Server")
