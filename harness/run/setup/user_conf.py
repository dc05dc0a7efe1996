"""A user.conf as LoadGen reads it, and the lines LoadGen would ignore without a word.

LoadGen's `FromConfig` stores every `model.scenario.key = value` line and later looks up the
keys it knows; a misspelt key (`traget_qps`), a line for a scenario that does not exist
(`*.Ofline.target_qps`) or a line without spaces around `=` is dropped silently and the run
goes on with the default. LoadGen publishes no list of its keys, so LoadGen itself is asked:
each key of a line that applies to the run is set to three values on top of the built-in
mlperf.conf and the rest of the user.conf, and a key that changes none of TestSettings'
fields is one LoadGen does not apply. That runs in a child process, because every
`FromConfig` call after a process's first writes a "multiple conf files" error into the next
test's detail log (which the submission checker counts).
"""

from __future__ import annotations

import difflib
import json
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

LOADGEN_SCENARIOS = ("SingleStream", "MultiStream", "Server", "Offline")
PROBE_VALUES = ("0", "1", "3")  # a bool, a count, a rate or a percentile differs between them
PROBE_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class ConfLine:
    number: int  # 1-based, as an editor shows it
    key: str  # the whole `model.scenario.name`
    value: str | None  # None: the line has no `= value` LoadGen can see

    @property
    def parts(self) -> tuple[str, str, str] | None:
        pieces = self.key.rsplit(".", 2)
        return (pieces[0], pieces[1], pieces[2]) if len(pieces) == 3 else None


@dataclass(frozen=True)
class IgnoredLine:
    line: ConfLine
    why: str

    def describe(self) -> str:
        return f"line {self.line.number} `{self.line.key}`: {self.why}"


def parse_lines(text: str) -> list[ConfLine]:
    """Every line that holds a key, tokenized the way LoadGen does (whitespace-separated
    tokens; a `#` token starts a comment)."""
    out = []
    for number, raw in enumerate(text.splitlines(), 1):
        tokens = raw.split()
        if not tokens or tokens[0].startswith("#"):
            continue
        value = tokens[2] if len(tokens) >= 3 and tokens[1] == "=" else None
        out.append(ConfLine(number, tokens[0], value))
    return out


def unparsable_line(path: Path) -> str | None:
    """Where LoadGen's parser gives up on a user.conf: a token other than `=` after the key,
    or a value that is neither an integer nor a float."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for number, raw in enumerate(text.splitlines(), 1):
        tokens = raw.split()
        if not tokens or tokens[0].startswith("#"):
            continue
        if len(tokens) >= 2 and tokens[1] != "=":
            return f"line {number}: {tokens[1]!r} where `=` belongs"
        for value in tokens[2:]:  # LoadGen reads every later token as a value, `#` too
            if not _is_number(value):
                return f"line {number}: value {value!r} is not a number"
    return None


def _is_number(text: str) -> bool:
    try:
        int(text, 0)
        return True
    except ValueError:
        pass
    try:
        float(text)
        return True
    except ValueError:
        return False


def ignored_lines(path: Path, loadgen_model: str, loadgen_scenario: str) -> list[IgnoredLine]:
    """The lines of the user.conf at `path` that LoadGen drops for this run's model and
    scenario, each with the reason. Lines for another benchmark are not judged; a model name
    that is a near miss of this run's is."""
    text = path.read_text(encoding="utf-8", errors="replace")
    found: list[IgnoredLine] = []
    to_probe: list[ConfLine] = []
    for line in parse_lines(text):
        parts = line.parts
        if "=" in line.key:
            found.append(IgnoredLine(line, "write `key = value` with spaces around `=`"))
            continue
        if line.value is None:
            found.append(IgnoredLine(line, "no `= value` after the key"))
            continue
        if parts is None:
            found.append(IgnoredLine(line, "not of the form model.scenario.key"))
            continue
        model, scenario, _ = parts
        if scenario != "*" and scenario not in LOADGEN_SCENARIOS:
            close = difflib.get_close_matches(scenario, LOADGEN_SCENARIOS, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            found.append(IgnoredLine(line, f"{scenario!r} is no LoadGen scenario{hint}"))
            continue
        if model not in ("*", loadgen_model):
            if difflib.SequenceMatcher(None, model.lower(), loadgen_model).ratio() >= 0.8:
                found.append(
                    IgnoredLine(
                        line,
                        f"model {model!r} is not this run's {loadgen_model!r} (LoadGen "
                        "matches names exactly)",
                    )
                )
            continue
        if scenario in ("*", loadgen_scenario):
            to_probe.append(line)
    if to_probe:
        verdicts = _ask_loadgen(text, loadgen_model, loadgen_scenario, to_probe)
        for line in to_probe:
            verdict = verdicts.get(line.key)
            if verdict is not None:
                found.append(IgnoredLine(line, verdict))
    return sorted(found, key=lambda f: f.line.number)


def _ask_loadgen(text: str, model: str, scenario: str, lines: Sequence[ConfLine]) -> dict[str, str]:
    """{line key: why LoadGen ignores it} for the lines whose key LoadGen does not apply."""
    probes = []
    for line in lines:
        parts = line.parts
        assert parts is not None
        # A `*` scenario line may be meant for another scenario of a shared file: it is
        # judged unknown only when no scenario reads it.
        scenarios = [scenario] if parts[1] != "*" else [scenario, *LOADGEN_SCENARIOS]
        probes.append({"key": line.key, "name": parts[2], "scenarios": scenarios})
    request = json.dumps({"conf": text, "model": model, "probes": probes})
    proc = subprocess.run(
        [sys.executable, "-c", "from harness.run.setup.user_conf import probe_main; probe_main()"],
        input=request,
        capture_output=True,
        text=True,
        timeout=PROBE_TIMEOUT_S,
    )
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"the LoadGen key check failed: {tail}")
    answers = json.loads(proc.stdout)
    out = {}
    for line in lines:
        answer = answers.get(line.key)
        if answer is None:
            continue
        why = f"LoadGen does not apply key {answer['name']!r} for {scenario}"
        if answer.get("suggest"):
            why += f" (did you mean {answer['suggest']}?)"
        out[line.key] = why
    return out


# --------------------------------------------------------------------------- the child side


def probe_main() -> None:
    """Child process: read a request on stdin, answer {line key: {name, suggest}} for every
    key that LoadGen does not apply."""
    import tempfile

    import mlperf_loadgen as lg

    req = json.load(sys.stdin)
    conf, model = req["conf"], req["model"]
    fields = [a for a in dir(lg.TestSettings()) if not a.startswith("_") and a.islower()]
    candidates = sorted({_conf_name(f) for f in fields} | set(fields))
    answers = {}
    with tempfile.TemporaryDirectory() as folder:
        probe_conf = Path(folder) / "probe.conf"

        def settings_with(extra: str, scenario: str) -> dict[str, str]:
            probe_conf.write_text(conf + "\n" + extra + "\n")
            s = lg.TestSettings()
            s.scenario = getattr(lg.TestScenario, scenario)
            s.FromConfig("", model, scenario, 0)  # the built-in mlperf.conf, as a run has it
            s.FromConfig(str(probe_conf), model, scenario, 1)
            return {a: repr(getattr(s, a)) for a in fields}

        def applied(name: str, scenario: str) -> bool:
            # the exact model.scenario form outranks every wildcard line of the file
            seen = [
                settings_with(f"{model}.{scenario}.{name} = {v}", scenario) for v in PROBE_VALUES
            ]
            return any(snap != seen[0] for snap in seen[1:])

        for probe in req["probes"]:
            name = probe["name"]
            if any(applied(name, s) for s in dict.fromkeys(probe["scenarios"])):
                continue
            scenario = probe["scenarios"][0]
            suggest = next(
                (
                    c
                    for c in difflib.get_close_matches(name, candidates, n=4, cutoff=0.7)
                    if c != name and applied(c, scenario)
                ),
                None,
            )
            answers[probe["key"]] = {"name": name, "suggest": suggest}
    json.dump(answers, sys.stdout)


def _conf_name(field: str) -> str:
    """A TestSettings field's likely user.conf spelling: server_target_qps -> target_qps,
    min_duration_ms -> min_duration (only a candidate: LoadGen confirms it or not)."""
    for prefix in ("single_stream_", "multi_stream_", "server_", "offline_"):
        field = field.removeprefix(prefix)
    for suffix in ("_ms", "_ns"):
        field = field.removesuffix(suffix)
    return field
