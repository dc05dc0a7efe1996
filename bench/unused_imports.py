"""What the packages transformers and NLTK import for nothing cost a process, and what
`sut.imports.hide_unused_packages` (scikit-learn and SciPy reported missing first) saves: the CPU
time of a fresh interpreter that imports (1) what a Server run's process imports of vLLM (its
engine arguments, AsyncLLM, the engine core's module; collector paused as a run pauses it) and
(2) the accuracy scoring's sentence splitter (evaluation.sentences: NLTK).

Sides, alternating across rounds, each a new interpreter: everything installed visible ("as
before"), and the packages hidden first ("hidden"). Printed: each side's CPU seconds (user +
system, median over the rounds), its ratio to "as before", and which of the packages it imported.

    python bench/unused_imports.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # bench.* when run as a script

from bench.collector_pause import cpu_of  # noqa: E402

HIDE = "from sut.imports import hide_unused_packages\nhide_unused_packages()\n"
IMPORTS = {
    "vLLM": "from sut.engine import collector_paused\n"
    "with collector_paused():\n    import vllm.engine.arg_utils\n"
    "import vllm.v1.engine.async_llm, vllm.v1.engine.core\n",
    "NLTK": "import evaluation.sentences\n",
}
REPORT = (
    "import sys\nfrom sut.imports import UNUSED_PACKAGES\n"
    "print(' '.join(n for n in UNUSED_PACKAGES if sys.modules.get(n) is not None) or '-')\n"
)
SIDES = {"as before": "", "hidden": HIDE}


def run(code: str) -> tuple[float, str]:
    cpu, out = cpu_of(code + REPORT)
    return cpu, out.strip().splitlines()[-1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    keys = [(what, side) for what in IMPORTS for side in SIDES]
    times: dict[tuple[str, str], list[float]] = {k: [] for k in keys}
    imported: dict[tuple[str, str], str] = {}
    for _ in range(args.rounds):
        for what, side in keys:
            cpu, imported[what, side] = run(SIDES[side] + IMPORTS[what])
            times[what, side].append(cpu)
    print(
        f"{'import':<6} {'side':<10} {'CPU s (median)':>15} {'ratio':>7}   {'imported':<14} rounds"
    )
    for what, side in keys:
        mid = statistics.median(times[what, side])
        base = statistics.median(times[what, "as before"])
        rounds = " ".join(f"{v:.2f}" for v in times[what, side])
        print(
            f"{what:<6} {side:<10} {mid:>15.2f} {mid / base:>7.2f}   "
            f"{imported[what, side]:<14} {rounds}"
        )


if __name__ == "__main__":
    main()
