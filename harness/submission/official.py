"""The official MLCommons submission checker (mlcommons/inference `tools/submission`), run on a
submission root from the user's clone of that repository: every submitter must pass it, and
`check-submission` applies our own reading of its rules first (harness.submission.checker).

Nothing of the checker is copied here: it is found in the clone, run in its own process with
this interpreter, and judged by its exit code (0: no errors); its last lines are shown.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from harness.errors import UsageError

# Where the checker lives in a clone, newest layout first: a package run as a script (its
# main.py puts its parent on sys.path), then the single-file checker of older rounds.
CHECKER_PATHS = (
    Path("tools/submission/submission_checker/main.py"),
    Path("tools/submission/submission_checker.py"),
)
TIMEOUT_S = 1800.0


def find_checker(repo: Path) -> Path:
    """The checker script in a clone of mlcommons/inference; UsageError naming the fix."""
    for rel in CHECKER_PATHS:
        if (repo / rel).is_file():
            return repo / rel
    raise UsageError(
        f"--official {repo}: no {CHECKER_PATHS[0]} or {CHECKER_PATHS[1]} there: pass a clone of "
        "the MLCommons inference repository (git clone --depth 1 "
        "https://github.com/mlcommons/inference)"
    )


def submitters(root: Path) -> list[str]:
    """The submitter folders of a submission root (closed/<submitter>, open/<submitter>)."""
    return sorted(
        {
            p.name
            for division in ("closed", "open", "network")
            for p in (root / division).glob("*")
            if p.is_dir()
        }
    )


def official_command(repo: Path, root: Path, round_name: str, csv: Path | None = None) -> list[str]:
    """The checker's command line for ROOT and the round (its --version)."""
    script = next(
        (repo / rel for rel in CHECKER_PATHS if (repo / rel).is_file()), repo / CHECKER_PATHS[0]
    )
    cmd = [
        sys.executable if csv is not None else "python3",
        str(script),
        "--input",
        str(root),
        "--version",
        round_name,
    ]
    names = submitters(root)
    if len(names) == 1:
        cmd += ["--submitter", names[0]]
    if csv is not None:
        cmd += ["--csv", str(csv)]
    return cmd


@dataclass(frozen=True)
class OfficialVerdict:
    passed: bool
    returncode: int
    command: list[str]
    tail: list[str]  # the checker's last lines (its summary and errors)

    def describe(self) -> str:
        head = (
            "official checker: PASS (no errors)"
            if self.passed
            else f"official checker: FAIL (exit {self.returncode})"
        )
        return "\n".join([f"{head}: {' '.join(self.command)}", *("  " + ln for ln in self.tail)])


def run_official(repo: Path, root: Path, round_name: str) -> OfficialVerdict:
    """Run the checker of `repo` on `root` for `round_name`; its verdict and last lines."""
    find_checker(repo)
    if not root.is_dir():
        raise UsageError(f"submission root {root} is not a folder: pass the folder holding closed/")
    with tempfile.TemporaryDirectory(prefix="mlperf-vllm-official-") as tmp:
        # The summary CSV goes aside: the submission root must hold nothing but the submission.
        cmd = official_command(repo, root.resolve(), round_name, Path(tmp) / "summary.csv")
        try:
            proc = subprocess.run(
                cmd, cwd=tmp, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
            )
        except subprocess.TimeoutExpired:
            return OfficialVerdict(False, 124, cmd, [f"did not finish in {TIMEOUT_S:.0f} s"])
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
    errors = [ln for ln in lines if "ERROR" in ln]
    tail = (errors[:20] + ["..."] if len(errors) > 20 else errors) + [
        ln for ln in lines[-3:] if ln not in errors
    ]
    return OfficialVerdict(proc.returncode == 0, proc.returncode, cmd, tail)
