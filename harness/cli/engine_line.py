"""`--engine-line LINES` (run, calibrate): the measured engine flags for this benchmark and
scenario, applied as if typed before the command's own flags.

The project's measured lines are TOML files, one per benchmark and scenario
(user_confs/engines/<gpu>/<benchmark>.<Scenario>.toml, user_confs/README.md): `benchmark` and
`scenario` name the test, the `[run]` table is a partial RunSpec (field names, values checked as
the run reads them), `[evidence]` the figure and the command that measured it. `--engine-line`
takes such a file or a folder of them (the file of the pair is picked); a path spelled as in
the README (`user_confs/engines/h200`) is found among the shipped files from any folder.

A user's own conf may keep its lines as comments instead, one per benchmark and scenario:

    # engine llama3_1-8b.Server: --engine-arg max_num_seqs=512 --prefill-policy 0x4 | <figure> | <command>

The flags are the text before the first ` | `, split like a shell line (`shlex`, never
evaluated). Either form goes in right after the command word, so a flag the user types wins
over the line's (argparse keeps the last value; vLLM's own parser does the same for repeated
`--engine-arg` keys); a line's `--engine-arg KEY=VALUE` whose KEY the user typed as a vLLM
flag (`--max-num-seqs 8`) is left out, since the pairs reach the engine after vLLM's flags.
A line may not name what the command line alone decides (benchmark, scenario, model,
dataset, output, conf); a folder or conf with no line, or a conf with two, for the pair is
refused with the keys it does hold.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

from harness.errors import UsageError

FLAG = "--engine-line"
COMMANDS = ("run", "calibrate")
LINE = re.compile(r"^#\s*engine\s+(\S+)\.(\w+):\s*(.*)$")
TOML_KEYS = ("benchmark", "scenario", "run", "evidence")  # an engine line kept as TOML
# What the command line alone decides: a line that sets these would run another test.
NOT_IN_LINE = (
    "--benchmark",
    "--scenario",
    "--model",
    "--dataset",
    "--output",
    "--user-conf",
    "--mode",
    FLAG,
)


def engine_lines(path: Path) -> dict[tuple[str, str], list[str]]:
    """Every `# engine BENCHMARK.Scenario: FLAGS | ...` line of a conf, as flag texts."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise UsageError(
            f"{FLAG} {path}: cannot read it ({exc.strerror or exc}): pass a folder of engine "
            "lines (e.g. user_confs/engines/h200), one line's .toml file, or a conf with "
            "`# engine <benchmark>.<Scenario>: <flags> | ...` lines"
        ) from None
    found: dict[tuple[str, str], list[str]] = {}
    for raw in text.splitlines():
        m = LINE.match(raw.strip())
        if m:
            found.setdefault((m.group(1), m.group(2)), []).append(m.group(3).split(" | ")[0])
    return found


def line_flags(path: Path, benchmark: str, scenario: str) -> list[str]:
    """The flags of the one engine line for benchmark.scenario: a TOML file, a folder of them
    (`<benchmark>.<Scenario>.toml`), or a conf's `# engine` line."""
    if path.is_dir():
        path = path / f"{benchmark}.{scenario}.toml"
        if not path.is_file():
            have = ", ".join(sorted(p.stem for p in path.parent.glob("*.toml"))) or "none"
            raise UsageError(
                f"{FLAG} {path.parent}: no {path.name} (it holds: {have}): measure one and "
                "add it, or pass the engine flags yourself"
            )
    flags = (
        toml_flags(path, benchmark, scenario)
        if path.suffix == ".toml"
        else _conf_line_flags(path, benchmark, scenario)
    )
    for flag in flags:
        name = flag.split("=", 1)[0]
        if name in NOT_IN_LINE:
            raise UsageError(
                f"{FLAG} {path}: the {benchmark}.{scenario} line sets {name}, which the "
                "command line alone decides: keep engine and SUT flags in the line"
            )
    return flags


def _conf_line_flags(path: Path, benchmark: str, scenario: str) -> list[str]:
    """The flags of a conf's one `# engine benchmark.scenario:` line."""
    lines = engine_lines(path)
    key = (benchmark, scenario)
    have = ", ".join(f"{b}.{s}" for b, s in sorted(lines)) or "none"
    if key not in lines:
        raise UsageError(
            f"{FLAG} {path}: no `# engine {benchmark}.{scenario}:` line (it holds: {have}): "
            "measure one and add it, or pass the engine flags yourself"
        )
    if len(lines[key]) > 1:
        raise UsageError(
            f"{FLAG} {path}: {len(lines[key])} lines for {benchmark}.{scenario}: keep the "
            "one to apply and turn the others into plain comments"
        )
    try:
        flags = shlex.split(lines[key][0])
    except ValueError as exc:
        raise UsageError(f"{FLAG} {path}: the {benchmark}.{scenario} line: {exc}") from None
    if flags and not flags[0].startswith("--"):
        raise UsageError(
            f"{FLAG} {path}: the {benchmark}.{scenario} line starts with {flags[0]!r}, not a "
            "--flag: write `# engine <benchmark>.<Scenario>: --flag value ... | figure | command`"
        )
    return flags


def toml_flags(path: Path, benchmark: str, scenario: str) -> list[str]:
    """The flags of an engine line kept as TOML: `benchmark` and `scenario` say which test it
    is for, `[run]` holds run options (a partial RunSpec: its field names, engine flags under
    `engine_args` or `engine_flags`), `[evidence]` what was measured with it and how."""
    import tomllib

    from harness.run.setup.spec import RunSpec

    try:
        doc = tomllib.loads(path.read_text())
    except OSError as exc:
        raise UsageError(f"{FLAG} {path}: cannot read it ({exc.strerror or exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{FLAG} {path}: not TOML: {exc}") from None
    unknown = sorted(set(doc) - set(TOML_KEYS))
    if unknown:
        raise UsageError(
            f"{FLAG} {path}: unknown key {unknown[0]!r}: an engine line holds "
            f"{', '.join(TOML_KEYS)}"
        )
    if (doc.get("benchmark"), doc.get("scenario")) != (benchmark, scenario):
        raise UsageError(
            f"{FLAG} {path}: the line is for {doc.get('benchmark')}.{doc.get('scenario')}, not "
            f"{benchmark}.{scenario}: pass the line of this benchmark and scenario"
        )
    run = doc.get("run", {})
    if not isinstance(run, dict) or not isinstance(doc.get("evidence", {}), dict):
        raise UsageError(f"{FLAG} {path}: [run] and [evidence] are tables")
    try:
        return RunSpec.partial_argv(run)
    except UsageError as exc:
        raise UsageError(f"{FLAG} {path}: [run] {exc}") from None


def expand(
    argv: list[str], command: str, benchmark: str, scenario: str, conf: str | None
) -> tuple[list[str], str]:
    """argv with the line's flags after the command word and `--engine-line LINES` removed; and
    a note saying what was applied. argv unchanged without a line (`conf`: the parsed
    --engine-line: a folder of TOML lines, one .toml file, or a conf with `# engine` lines)."""
    if conf is None or command not in COMMANDS:
        return argv, ""
    from harness.resources import resolve_user_path

    flags = line_flags(resolve_user_path(Path(conf)) or Path(conf), benchmark, scenario)
    rest: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == FLAG:
            skip = True
        elif not arg.startswith(FLAG + "="):
            rest.append(arg)
    flags, dropped = _without_typed_keys(flags, rest)
    at = rest.index(command) + 1
    note = f"engine line {benchmark}.{scenario} from {conf}: {shlex.join(flags) or '(no flags)'}"
    if dropped:
        note += f" (left out, typed on the command line: {', '.join(dropped)})"
    return rest[:at] + flags + rest[at:], note


def _typed_keys(argv: list[str]) -> set[str]:
    """The names of the --flags in argv, as engine argument keys (`--max-num-seqs 8` and
    `--no-enable-prefix-caching` name max_num_seqs and enable_prefix_caching)."""
    keys = set()
    for arg in argv:
        if arg.startswith("--") and len(arg) > 2:
            key = arg[2:].split("=", 1)[0].replace("-", "_")
            keys.add(key)
            if key.startswith("no_"):
                keys.add(key[3:])
    return keys


def _without_typed_keys(flags: list[str], typed: list[str]) -> tuple[list[str], list[str]]:
    """The line's flags less its `--engine-arg KEY=VALUE` pairs whose KEY the user typed as a
    flag of its own (`--max-num-seqs 8`): the pairs reach the engine after vLLM's flags, so the
    line's would beat what was typed. A pair the user typed wins by coming later already."""
    keys = _typed_keys(typed)
    kept: list[str] = []
    dropped: list[str] = []
    i = 0
    while i < len(flags):
        flag = flags[i]
        pair = None
        if flag == "--engine-arg" and i + 1 < len(flags):
            pair, step = flags[i + 1], 2
        elif flag.startswith("--engine-arg="):
            pair, step = flag.split("=", 1)[1], 1
        if pair is not None and pair.split("=", 1)[0].replace("-", "_") in keys:
            dropped.append(pair)
            i += step
            continue
        kept.append(flag)
        i += 1
    return kept, dropped


def add_engine_line_argument(p: Any) -> None:
    """--engine-line, one declaration for `run` and `calibrate` (expanded by `expand` before
    either parses its flags for good)."""
    p.add_argument(
        "--engine-line",
        metavar="LINES",
        help="the measured engine line for this benchmark and scenario, applied as if typed "
        "first (flags given here win): a folder of <benchmark>.<Scenario>.toml lines (e.g. "
        "user_confs/engines/h200), one such file, or a conf with `# engine` lines",
    )
