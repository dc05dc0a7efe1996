"""Compliance TEST06 for the LLM benchmarks: is every streamed output self-consistent?

`mlperf-vllm run ... --audit-config audit.config` runs the test (LoadGen logs every sample's
output and first token to `mlperf_log_accuracy.json`); `check_test06` applies the three
checks of MLCommons' compliance/TEST06 to that log:

- first token: the ids reported with FirstTokenComplete are a prefix of the final output
  (skipped for Offline, where no first token is reported);
- EOS: an output ends with at most one EOS id (the model's own EOS ids, all of them: Llama 3.1
  Instruct has three);
- length: the number of ids in the output equals the token_count the SUT reported.

`write_test06` writes `TEST06/verify_accuracy.txt` with the exact lines the submission checker
looks for, and copies the accuracy log to `TEST06/accuracy/` as a submission expects.

Differences from the MLCommons script, all stricter: its EOS loop never looks at the output's
first id (an output of two EOS ids passes there, fails here), and an unreadable sample is a
failure here rather than a skipped check.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness import files
from harness.errors import UsageError
from harness.run.record.logs import ACCURACY_LOG, DETAIL_LOG, parse_detail_log
from harness.run.record.result import RESULT_FILE, RunResult

VERIFY_FILE = "verify_accuracy.txt"
DTYPES = {"int32": np.int32, "int64": np.int64, "int16": np.int16, "float32": np.float32}
MAX_EXAMPLES = 5  # failing samples named in the report, per check


@dataclass(frozen=True)
class Test06Result:
    samples: int
    first_token_pass: bool | None  # None: skipped (Offline)
    eos_pass: bool
    length_pass: bool
    eos_token_ids: tuple[int, ...]
    problems: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.first_token_pass is not False and self.eos_pass and self.length_pass

    def text(self) -> str:
        """verify_accuracy.txt, in the lines the submission checker matches."""
        first = "Skipped" if self.first_token_pass is None else str(self.first_token_pass)
        return (
            f"First token check pass: {first}\n"
            f"EOS check pass: {self.eos_pass}\n"
            f"Sample length check pass: {self.length_pass}\n"
            + ("TEST06 verification complete\n" if self.passed else "TEST06 verification failed\n")
        )


def _ids(hex_text: str | None, dtype) -> np.ndarray:
    return np.frombuffer(bytes.fromhex(hex_text or ""), dtype=dtype)


def trailing_eos(data: np.ndarray, eos_ids: Iterable[int]) -> int:
    """How many EOS ids the output ends with."""
    eos = set(int(e) for e in eos_ids)
    n = 0
    for tok in data[::-1]:
        if int(tok) not in eos:
            break
        n += 1
    return n


def check_test06(
    accuracy_log: str | Path,
    eos_token_ids: Sequence[int],
    *,
    first_token_check: bool = True,
    dtype: str = "int32",
) -> Test06Result:
    """Apply the TEST06 checks to a LoadGen accuracy log."""
    path = Path(accuracy_log)
    if not path.is_file():
        raise UsageError(
            f"no {ACCURACY_LOG} at {path}: pass --log-dir with the folder of the "
            "TEST06 run's LoadGen logs"
        )
    if not eos_token_ids:
        raise UsageError("no EOS token id: pass --model (or --eos-token-id)")
    try:
        records = json.loads(path.read_text() or "[]")
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path} is not a complete LoadGen accuracy log ({exc})") from None
    np_dtype = DTYPES[dtype]
    first_ok = eos_ok = len_ok = True
    problems: list[str] = []

    def note(kind: str, msg: str) -> None:
        if sum(p.startswith(kind) for p in problems) < MAX_EXAMPLES:
            problems.append(f"{kind}: {msg}")

    for rec in records:
        where = f"qsl_idx {rec.get('qsl_idx')} (seq_id {rec.get('seq_id')})"
        try:
            data = _ids(rec.get("data"), np_dtype)
            first = _ids(rec.get("token_data"), np_dtype) if "token_data" in rec else None
        except ValueError as exc:
            first_ok = eos_ok = len_ok = False
            note("unreadable", f"{where}: {exc}")
            continue
        if first_token_check:
            if first is None or first.size == 0:
                first_ok = False
                note("first token", f"{where}: no first token was logged")
            elif first.size > data.size or not np.array_equal(first, data[: first.size]):
                first_ok = False
                note(
                    "first token",
                    f"{where}: first token(s) {first[:8].tolist()} are not "
                    f"a prefix of the output {data[:8].tolist()}",
                )
        n_eos = trailing_eos(data, eos_token_ids)
        if n_eos > 1:
            eos_ok = False
            note("EOS", f"{where}: output ends with {n_eos} EOS ids")
        count = rec.get("token_count")
        if count is None or int(count) != data.size:
            len_ok = False
            note("length", f"{where}: {data.size} ids in the output, token_count {count}")
    if not records:
        first_ok = eos_ok = len_ok = False
        problems.append("empty: the accuracy log holds no sample")
    return Test06Result(
        samples=len(records),
        first_token_pass=first_ok if first_token_check else None,
        eos_pass=eos_ok,
        length_pass=len_ok,
        eos_token_ids=tuple(int(e) for e in eos_token_ids),
        problems=problems,
    )


def eos_token_ids_from_model(model: str | Path) -> list[int]:
    """The model's EOS ids: generation_config.json first (what generation stops on), then
    config.json, then the tokenizer's eos_token."""
    root = Path(model)
    ids: list[int] = []
    for name in ("generation_config.json", "config.json"):
        f = root / name
        if f.is_file():
            value = json.loads(f.read_text()).get("eos_token_id")
            if value is not None:
                ids = [int(v) for v in (value if isinstance(value, list) else [value])]
                break
    if not ids and (root / "tokenizer_config.json").is_file():
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(root))
        if tok.eos_token_id is not None:
            ids = [int(tok.eos_token_id)]
    if not ids:
        raise UsageError(f"no eos_token_id found in {root}: pass --eos-token-id")
    return ids


def scenario_of(log_dir: Path) -> str | None:
    detail = log_dir / DETAIL_LOG
    if not detail.is_file():
        return None
    v = parse_detail_log(detail).values
    return str(v.get("effective_scenario") or v.get("requested_scenario") or "") or None


def model_of_run(log_dir: Path) -> str | None:
    """The --model of the `mlperf-vllm run` that wrote these logs (its result.json)."""
    for folder in (log_dir, log_dir.parent):
        f = folder / RESULT_FILE
        if f.is_file():
            result = RunResult.read(f)
            return result.model if result is not None and result.has("model") else None
    return None


def write_test06(result: Test06Result, accuracy_log: Path, output: Path) -> Path:
    """OUTPUT/TEST06/verify_accuracy.txt and OUTPUT/TEST06/accuracy/mlperf_log_accuracy.json;
    an OUTPUT already named TEST06 is the TEST06 folder itself (no TEST06/TEST06)."""
    dest = output if output.name == "TEST06" else output / "TEST06"
    (dest / "accuracy").mkdir(parents=True, exist_ok=True)
    verify = dest / VERIFY_FILE
    copy = dest / "accuracy" / ACCURACY_LOG
    if accuracy_log.resolve() != copy.resolve():
        with files.atomic_path(copy) as tmp:
            shutil.copyfile(accuracy_log, tmp)
    files.write_text(verify, result.text())  # the verdict last: it names a complete log
    return verify


def run_test06(
    log_dir: Path,
    *,
    model: str | Path | None = None,
    eos_token_ids: Sequence[int] | None = None,
    scenario: str | None = None,
    output: Path | None = None,
    dtype: str = "int32",
) -> tuple[Test06Result, Path]:
    """The `mlperf-vllm compliance test06` command: check LOG_DIR, write the report."""
    if not log_dir.is_dir():
        raise UsageError(
            f"log dir {log_dir} does not exist: pass --log-dir with the folder "
            f"holding the TEST06 run's {ACCURACY_LOG}"
        )
    if not eos_token_ids:
        model = model or model_of_run(log_dir)
        if model is None:
            raise UsageError(
                "cannot tell the model's EOS id: pass --model PATH (or --eos-token-id N)"
            )
        if not Path(model).is_dir():
            raise UsageError(
                f"model {model} does not exist: pass --model with the checkpoint "
                "folder (its generation_config.json names the EOS id)"
            )
        eos_token_ids = eos_token_ids_from_model(model)
    scenario = scenario or scenario_of(log_dir) or "Server"
    result = check_test06(
        log_dir / ACCURACY_LOG, eos_token_ids, first_token_check=scenario != "Offline", dtype=dtype
    )
    verify = write_test06(result, log_dir / ACCURACY_LOG, output or log_dir)
    return result, verify


def verify_test06_run(log_dir: Path, prep: Any) -> dict[str, Any]:
    """`run --test06`'s verification of the TEST06 test it just ran (harness.run.execute.runner's
    Test06Check): the same checks and files as `compliance test06 --log-dir LOG_DIR --output
    OUTPUT/TEST06`, printed as that command prints them."""
    req = prep.request
    result, verify = run_test06(
        log_dir, model=req.model, scenario=req.scenario, output=log_dir.parent
    )
    print(result.text(), end="", flush=True)
    for problem in result.problems:
        print(f"  {problem}", flush=True)
    return {
        "passed": result.passed,
        "verify": str(verify),
        "samples": result.samples,
        "problems": list(result.problems),
    }
