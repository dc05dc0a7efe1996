"""What the packages transformers imports for nothing cost a process that imports vLLM, and what
`sut.engine.hide_unused_packages` (scikit-learn and SciPy reported missing before transformers
is imported) saves: the CPU time of a fresh interpreter that imports what a Server run's process
imports of vLLM (its engine arguments, AsyncLLM, the engine core's module), collector paused as
a run pauses it.

Sides, alternating across rounds, each a new interpreter: everything installed visible ("as
before"), and `import_vllm()` with the packages hidden ("hidden"). Printed: each side's CPU
seconds (user + system, median over the rounds), its ratio to the first, and which of the
packages the side imported.

    python bench/unused_imports.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

ENGINE = "import vllm.v1.engine.async_llm, vllm.v1.engine.core\n"
REPORT = (
    "from sut.engine import UNUSED_BY_ENGINES\n"
    "print(' '.join(n for n in UNUSED_BY_ENGINES if sys.modules.get(n) is not None) or '-')\n"
)
SIDES = {
    "as before": "import sys\nfrom sut.engine import collector_paused\n"
    "with collector_paused():\n    import vllm.engine.arg_utils\n",
    "hidden": "import sys\nfrom sut.engine import import_vllm\nimport_vllm()\n",
}


def run(code: str) -> tuple[float, str]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(
        [sys.executable, "-c", code + ENGINE + REPORT],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, proc.stdout.strip().splitlines()[-1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    times: dict[str, list[float]] = {side: [] for side in SIDES}
    imported: dict[str, str] = {}
    for _ in range(args.rounds):
        for side, code in SIDES.items():
            cpu, imported[side] = run(code)
            times[side].append(cpu)
    base = statistics.median(times["as before"])
    print(f"{'side':<10} {'CPU s (median)':>15} {'ratio':>7}   {'imported':<14} rounds")
    for side, values in times.items():
        mid = statistics.median(values)
        rounds = " ".join(f"{v:.2f}" for v in values)
        print(f"{side:<10} {mid:>15.2f} {mid / base:>7.2f}   {imported[side]:<14} {rounds}")


if __name__ == "__main__":
    main()
