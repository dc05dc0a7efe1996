"""sut.engine.collector_paused: Python's cyclic collector off around vLLM's import, what the
import made frozen, the collector on again, whatever happens inside. Checked in a fresh
interpreter (a freeze in the test's own process would hold the suite's objects), with small
modules of its own standing for vLLM's."""

from __future__ import annotations

from tests.conftest import fresh_report

SCRIPT = r"""
import atexit, gc, json, os, sys

report = {}
atexit.register(lambda: print(json.dumps({**report, "frozen_at_exit": gc.get_freeze_count()})))

from sut.engine import collector_paused

sys.path.insert(0, sys.argv[1])
for name in ("first", "second", "third"):
    with open(os.path.join(sys.argv[1], name + ".py"), "w") as f:
        f.write("TABLE = [[i] for i in range(50000)]\n")

with collector_paused():
    report["off_inside"] = not gc.isenabled()
    import first
report["on_after_import"] = gc.isenabled()
report["frozen_after_import"] = gc.get_freeze_count()

with collector_paused():
    made = [[i] for i in range(1000)]  # no import: nothing frozen
report["frozen_after_no_import"] = gc.get_freeze_count()

gc.disable()
with collector_paused():  # a caller's own pause (or an outer one) is left as it is
    import second
report["still_off"] = not gc.isenabled()
report["frozen_inside_a_callers_pause"] = gc.get_freeze_count()
gc.enable()

try:
    with collector_paused():
        import third
        raise RuntimeError("inside")
except RuntimeError:
    pass
report["on_after_an_error"] = gc.isenabled()

r, w = os.pipe()
pid = os.fork()  # an engine core forked after the pause runs with the collector on
if pid == 0:
    os.write(w, b"1" if gc.isenabled() else b"0")
    os._exit(0)
os.waitpid(pid, 0)
report["on_in_a_forked_child"] = os.read(r, 1) == b"1"
"""


def test_the_pause_freezes_what_an_import_made_and_always_turns_the_collector_back_on(tmp_path):
    report = fresh_report(SCRIPT, str(tmp_path), timeout=60)
    assert report["off_inside"] and report["on_after_import"], report
    assert report["frozen_after_import"] > 50000, report  # the module's table among them
    assert report["frozen_after_no_import"] == report["frozen_after_import"], report
    assert report["still_off"], report
    assert report["frozen_inside_a_callers_pause"] == report["frozen_after_import"], report
    assert report["on_after_an_error"] and report["on_in_a_forked_child"], report
    assert report["frozen_at_exit"] == 0, report  # unfrozen for the interpreter's teardown
