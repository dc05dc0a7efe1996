"""What Python's cyclic collector costs a process that imports vLLM, and what
`sut.engine.import_vllm` (the import under `collector_paused`: the collector off, what the import
made frozen) saves: the CPU time of a fresh interpreter that imports vLLM's engine arguments,
then makes and drops some objects as a run's set-up does after it.

Sides, alternating across rounds, each a new interpreter: `import vllm.engine.arg_utils` as is
("collector on"); the collector off for the import and on after it, nothing frozen ("off, no
freeze": what a plain `gc.disable()` would give); `import_vllm()` ("paused + frozen"). Printed:
each side's CPU seconds (user + system, median over the rounds) and its ratio to the first.

    python bench/collector_pause.py [--rounds 3] [--objects 200000]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

AFTER = """
made = [[{{}} for _ in range(10)] for _ in range({objects})]
del made
gc.collect()
"""

SIDES = {
    "collector on": "import gc\nimport vllm.engine.arg_utils\n",
    "off, no freeze": "import gc\ngc.disable()\nimport vllm.engine.arg_utils\ngc.enable()\n",
    "paused + frozen": "import gc\nfrom sut.engine import import_vllm\nimport_vllm()\n",
}


def cpu_of(code: str) -> tuple[float, str]:
    """The CPU seconds (user + system) of a fresh interpreter running `code` in the checkout,
    and what it printed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), proc.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--objects", type=int, default=200000, help="lists of 10 dicts made after")
    args = ap.parse_args()
    times: dict[str, list[float]] = {side: [] for side in SIDES}
    for _ in range(args.rounds):
        for side, code in SIDES.items():
            times[side].append(cpu_of(code + AFTER.format(objects=args.objects))[0])
    base = statistics.median(times["collector on"])
    print(f"{'side':<18} {'CPU s (median)':>15} {'ratio':>7}   rounds")
    for side, values in times.items():
        mid = statistics.median(values)
        rounds = " ".join(f"{v:.2f}" for v in values)
        print(f"{side:<18} {mid:>15.2f} {mid / base:>7.2f}   {rounds}")


if __name__ == "__main__":
    main()
