"""`mlperf-vllm ray-check`: is the Ray cluster ready for a layout, before any engine starts.

Lists every node of the cluster (address, state, devices) and says whether its live nodes
hold the layout (TP x PP x DP devices, and as many nodes as the recipe spreads over). Exit 0
when they do; exit 2 with one line naming what is missing when they do not, or when no
cluster answers. `run` makes the same check itself for a Ray layout; this is the step of the
multi-node runbook that comes before it (scripts/multinode.sh ray-check).
"""

from __future__ import annotations

import argparse

from harness.cli.common import EXIT_OK, add_command
from harness.errors import UsageError


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not 1 or more")
    return value


def add_parser(sub) -> None:
    p = add_command(
        sub,
        "ray-check",
        cmd_ray_check,
        help="check that the Ray cluster holds a parallel layout (before a multi-node run)",
    )
    p.add_argument(
        "--address",
        help="the cluster's GCS address HOST:PORT (default: $RAY_ADDRESS, else a cluster "
        "started on this node)",
    )
    for flag, short in (("tensor", "-tp"), ("pipeline", "-pp"), ("data", "-dp")):
        p.add_argument(
            f"--{flag}-parallel-size",
            short,
            type=_positive,
            default=1,
            metavar="N",
            help=f"the run's {flag}-parallel size, as given to `run`",
        )
    p.add_argument(
        "--nodes", type=_positive, help="live nodes the layout spreads over (default: any)"
    )
    p.add_argument(
        "--device",
        default="GPU",
        help="the Ray resource each worker takes (GPU, as vLLM's CUDA platform asks)",
    )


def cmd_ray_check(args: argparse.Namespace) -> int:
    from harness.run.setup.ray_cluster import (
        RayLayout,
        format_cluster,
        probe_cluster,
        ray_address,
        shortfall,
    )

    layout = RayLayout(
        tensor_parallel=args.tensor_parallel_size,
        pipeline_parallel=args.pipeline_parallel_size,
        data_parallel=args.data_parallel_size,
        executor="ray",
    )
    view = probe_cluster(args.address or ray_address())
    print(format_cluster(view, args.device), flush=True)
    problem = shortfall(layout, view, args.device, args.nodes)
    if problem:
        raise UsageError(problem)
    nodes = f" over {args.nodes} nodes" if args.nodes else ""
    print(
        f"ready: {layout.describe()} ({layout.devices} {args.device}){nodes} fits the "
        f"{len(view.alive)} live node(s)"
    )
    return EXIT_OK
