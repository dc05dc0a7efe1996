"""user.conf lines LoadGen drops without a word, judged by LoadGen itself (harness.run.setup.user_conf):
every shipped conf is clean, and each kind of slip is named with its line."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.benchmarks import resolve
from harness.run.setup.settings import LOADGEN_SCENARIO
from harness.run.setup.user_conf import ignored_lines, unparsable_line
from tests.conftest import REPO

CONFS = REPO / "user_confs"


@pytest.mark.parametrize(
    "benchmark, scenario, conf",
    [
        ("llama3_1-8b", "Offline", "llama3_1-8b/offline.conf"),
        ("llama3_1-8b", "Server", "llama3_1-8b/server.conf"),
        ("llama3_1-8b", "Interactive", "llama3_1-8b/interactive.conf"),
        ("llama3_1-8b-edge", "SingleStream", "llama3_1-8b-edge/singlestream.conf"),
        ("llama2-70b", "Server", "llama2-70b/server.conf"),
        ("llama3_1-405b", "Interactive", "llama3_1-405b/interactive.conf"),
        ("llama3_1-8b", "Offline", "smoke/offline.conf"),
        ("llama3_1-8b", "Server", "smoke/server.conf"),
        ("llama3_1-8b", "Offline", "examples/h200.conf"),
    ],
)
def test_shipped_confs_have_no_ignored_line(benchmark, scenario, conf):
    _, model = resolve(benchmark, scenario)
    assert ignored_lines(CONFS / conf, model, LOADGEN_SCENARIO[scenario]) == []


def test_each_slip_is_named_with_its_line(tmp_path: Path):
    conf = tmp_path / "user.conf"
    conf.write_text(
        "# a comment\n"
        "*.Offline.traget_qps = 5\n"  # 2: misspelt
        "*.Offline.min_duration = 0\n"  # fine
        "*.Offline.min_query_count=10\n"  # 4: LoadGen reads `a=b` as a key without a value
        "*.Ofline.target_qps = 7\n"  # 5: no such scenario
        "llama3_1-8B.Offline.target_qps = 3\n"  # 6: near miss of the model name
        "resnet50.Offline.target_qps = 3\n"  # another benchmark's line: not judged
        "*.*.ttft_latency = 2000\n"  # read for Server: fine in a shared file
        "*.Offline.ttft_latency = 2000\n"  # 9: LoadGen reads it for Server only
        "*.Server.bogus = 1\n"  # another scenario's line: judged in a Server run
        "target_qps = 4\n"  # 11: not model.scenario.key
    )
    found = {i.line.number: i.why for i in ignored_lines(conf, "llama3_1-8b", "Offline")}
    assert sorted(found) == [2, 4, 5, 6, 9, 11], found
    assert "did you mean target_qps?" in found[2]
    assert "spaces around `=`" in found[4]
    assert "did you mean Offline?" in found[5]
    assert "LoadGen matches names exactly" in found[6]
    assert "does not apply key 'ttft_latency' for Offline" in found[9]
    server = {i.line.number for i in ignored_lines(conf, "llama3_1-8b", "Server")}
    assert 10 in server and 9 not in server  # the same file judged for Server


def test_where_loadgens_parser_gives_up(tmp_path: Path):
    conf = tmp_path / "user.conf"
    conf.write_text("*.Offline.min_duration = 0\n*.Offline.target_qps = 10 # ten\n")
    assert unparsable_line(conf) == "line 2: value '#' is not a number"
    conf.write_text("*.Offline.target_qps : 10\n")
    assert unparsable_line(conf) == "line 1: ':' where `=` belongs"
