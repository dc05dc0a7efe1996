"""`mlperf-vllm compare DIR...`: finished run folders side by side (harness.run.record.compare)."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.cli.common import EXIT_OK, add_command


def add_parser(sub) -> None:
    cmp = add_command(
        sub,
        "compare",
        cmd_compare,
        help="finished run folders side by side: validity, rates, p99s, and what differs",
    )
    cmp.add_argument("dirs", type=Path, nargs="+", metavar="DIR", help="--output folders of runs")
    cmp.add_argument(
        "--csv", type=Path, metavar="FILE", help="also write the table as CSV (one knob a column)"
    )


def cmd_compare(args: argparse.Namespace) -> int:
    from harness import files
    from harness.run.record.compare import load_runs, render, rows, to_csv

    table = rows(load_runs(args.dirs))
    print(render(table))
    if args.csv is not None:
        files.write_text(args.csv, to_csv(table))
        print(f"csv: {args.csv}")
    return EXIT_OK
