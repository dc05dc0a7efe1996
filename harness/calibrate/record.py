"""calibration.json: what a Server / Interactive calibration found, for programs (a capacity
sweep reads the highest passing target and the engine it ran). Typed here; the JSON keys are the
ones earlier calibrations wrote, so their files still read."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from harness import files

CALIBRATION_FILE = "calibration.json"


@dataclass
class TrialResult:
    """One Server-like trial: its settings, LoadGen's figures, the sustained verdict, the rule's
    judgement."""

    name: str
    target_qps: float
    duration_s: float  # min_duration asked
    loaded_samples: int
    passed: bool
    reasons: list[str]
    notes: list[str]
    validity: str
    ttft_p99_ms: float | None
    tpot_p99_ms: float | None
    completed_qps: float | None  # LoadGen's, drain included
    queries: int
    wall_s: float
    sustained: dict[str, Any]
    log_dir: str
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        s = self.sustained
        kept = {True: "kept up", False: "FELL BEHIND", None: "not judged"}[s.get("kept_up")]
        return (
            f"{self.target_qps:g} QPS: TTFT p99 {_ms(self.ttft_p99_ms)}, TPOT p99 "
            f"{_ms(self.tpot_p99_ms)}, completed {s.get('completed_qps_in_window', 0):.2f}/s "
            f"in the steady part ({s.get('completed_to_issued', 0):.3f} of issued), backlog "
            f"{s.get('backlog_start', 0):.0f} -> {s.get('backlog_end', 0):.0f}, {kept} -> "
            + ("pass" if self.passed else "FAIL: " + "; ".join(self.reasons))
        )


def _ms(v: float | None) -> str:
    return "n/a" if v is None else f"{v:,.1f} ms"


@dataclass
class ConfirmationRun:
    """One `--confirm` run of the written conf for its full min_duration."""

    attempt: int
    target_qps: float
    held: bool  # VALID and the engine did not fall behind
    validity: str | None
    invalid_reasons: list[str]
    duration_s: float | None
    samples_per_second: float | None
    ttft_p99_ms: float | None
    tpot_p99_ms: float | None
    kept_up: bool | None
    output: str


@dataclass
class CalibrationRecord:
    """A Server / Interactive calibration: the ceiling, every trial, the highest passing target,
    the written one and, with `--confirm`, each confirmation run."""

    benchmark: str
    loadgen_model: str
    scenario: str
    limits_ms: dict[str, float]  # {"ttft_p99": ..., "tpot_p99": ...}
    engine_start_s: float
    offline_samples_per_second: float
    gpus: int  # tensor x pipeline x data parallel: figures per GPU are these / gpus
    offline_samples_per_second_per_gpu: float
    measure_samples: int
    trial_s: float | None
    trials: list[TrialResult]
    highest_passing_qps: float | None
    backoff: float
    run: dict[str, Any]  # the engine's args (asked and resolved), data, sampling, environment
    written_qps: float | None = None
    # The hold trials at the written target (each twice a search trial's length), stepping down
    # by the backoff until one passes; absent from the file when none ran (--hold-trials 0).
    holds: list[TrialResult] | None = None
    # with --confirm (absent from the file without it)
    confirmations: list[ConfirmationRun] | None = None
    confirmed_qps: float | None = None
    confirm_passes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if self.holds is None:
            del out["holds"]
        if self.confirmations is None:
            for key in ("confirmations", "confirmed_qps", "confirm_passes"):
                del out[key]
        return out

    def write(self, path: Path) -> None:
        """The record at `path`, written aside and renamed into place."""
        files.write_text(path, json.dumps(self.to_dict(), indent=2, default=str) + "\n")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CalibrationRecord:
        """A record from calibration.json's dict; ValueError when it is not one."""
        try:
            known = _known(cls, d)
            known["trials"] = [TrialResult(**_known(TrialResult, t)) for t in d["trials"]]
            if d.get("holds") is not None:
                known["holds"] = [TrialResult(**_known(TrialResult, t)) for t in d["holds"]]
            if d.get("confirmations") is not None:
                known["confirmations"] = [
                    ConfirmationRun(**_known(ConfirmationRun, c)) for c in d["confirmations"]
                ]
            return cls(**known)
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"not a calibration record: {exc}") from None

    @classmethod
    def read(cls, path: Path) -> CalibrationRecord:
        """The record in `path`; ValueError when the file is not one (OSError when unreadable)."""
        return cls.from_dict(json.loads(path.read_text()))


def _known(cls: type, d: dict[str, Any]) -> dict[str, Any]:
    """The keys of `d` that are fields of the dataclass `cls` (a newer file may hold more)."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in d.items() if k in names}
