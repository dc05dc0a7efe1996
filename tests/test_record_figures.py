"""One truth per figure: every measured figure an engine line's evidence (user_confs/engines/
<gpu>/*.toml) or a GPU example conf (user_confs/examples/*.conf) quotes, and every target those
confs ship, appears in bench/record/RESULTS.md, the record of every measured number. A figure
quoted with fewer decimals matches a recorded one that rounds to it (7,288 for 7,287.9). No
engine starts."""

from __future__ import annotations

import re
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "record" / "RESULTS.md"
# A figure: a number with a thousands separator or a decimal part (integers alone are settings:
# 512 seqs, 600 s), not part of a version (vLLM 0.26.0) or of a word.
FIGURE = re.compile(r"(?<![\w.,])(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+\.\d+)(?![\w]|\.\d|,\d{3})")
VERSION = re.compile(r"\d+\.\d+\.\d+")
TARGET = re.compile(r"\.target_qps = (\d+(?:\.\d+)?)")


def figures(text: str) -> list[str]:
    return FIGURE.findall(VERSION.sub(" ", text))


def _recorded() -> tuple[list[Decimal], str]:
    text = RESULTS.read_text(encoding="utf-8")
    return [Decimal(n.replace(",", "")) for n in figures(text)], text


def _is_recorded(quoted: str, recorded: list[Decimal], text: str) -> bool:
    value = Decimal(quoted.replace(",", ""))
    exp = value.as_tuple().exponent
    assert isinstance(exp, int)
    if exp == 0 and "," not in quoted:  # a whole target (386): a number of its own there
        return re.search(rf"(?<![\d.,]){quoted}(?![\d,]|\.\d)", text) is not None
    quantum = Decimal(1).scaleb(exp)
    return any(
        r.as_tuple().exponent <= exp and r.quantize(quantum, ROUND_HALF_UP) == value
        for r in recorded
    )


def _sources() -> dict[str, str]:
    out = {}
    for path in sorted((REPO / "user_confs" / "engines").glob("*/*.toml")):
        out[str(path.relative_to(REPO))] = tomllib.loads(path.read_text())["evidence"]["figure"]
    for path in sorted((REPO / "user_confs" / "examples").glob("*.conf")):
        out[str(path.relative_to(REPO))] = path.read_text()
    return out


def test_every_quoted_figure_and_shipped_target_is_in_the_record():
    recorded, text = _recorded()
    missing = {}
    for name, quoted in _sources().items():
        comments = "\n".join(ln for ln in quoted.splitlines() if ln.lstrip().startswith("#"))
        wanted = figures(comments or quoted) + TARGET.findall(quoted)
        lost = [q for q in wanted if not _is_recorded(q, recorded, text)]
        if lost:
            missing[name] = lost
    assert not missing, f"quoted but not in {RESULTS.name}: {missing}"


def test_the_rule_catches_a_figure_the_record_does_not_hold():
    recorded, text = _recorded()
    assert _is_recorded("7,288", recorded, text)  # recorded as 7,287.9
    assert not _is_recorded("51.994", recorded, text)
    assert figures("vLLM 0.26.0: 7,288 tok/s, 0.930 of 54.23-54.34, 512 seqs") == [
        "7,288",
        "0.930",
        "54.23",
        "54.34",
    ]


def test_each_engine_line_leads_with_what_it_ships_and_how_long_it_ran():
    """Each measured line's evidence opens with the value it ships (`ships ...`) and says the
    length of the run behind it (a run of N s, or min_duration 0 for a throughput run)."""
    for path in sorted((REPO / "user_confs" / "engines").glob("*/*.toml")):
        figure = tomllib.loads(path.read_text())["evidence"]["figure"]
        if figure == "not yet measured":
            continue
        assert figure.startswith("ships "), path.name
        assert re.search(r"\b\d+(\.\d+)? s\b", figure), path.name
