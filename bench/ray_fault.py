"""A Ray node lost mid-run, on whatever machine holds the cluster (bench/gpu.sh ray-70b's fault
step; tests/test_ray_e2e.py makes the same check on this CPU's loopback cluster).

Starts the given `mlperf-vllm run` command (after `--`), waits until LoadGen is issuing queries
(its detail log names the generated query count) and AFTER seconds more, then kills the raylet
of the node at NODE_IP with SIGKILL (its workers go with it). Then it times how long the run
takes to end and reads what it left: the exit status, the one `error:` line, result.json's
status / error / issued and completed counts, and the Ray worker processes of the run still
alive on this machine 10 s later. One JSON document to --json, a line per fact to stdout.

    python3 bench/ray_fault.py --node-ip 127.0.0.2 --after 30 --out RUN_DIR --json F -- \\
        python3 -m harness.cli run ... --output RUN_DIR --distributed-executor-backend ray

The run is given --timeout-s (default 600) after the kill before it counts as hung (killed, and
said so).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil


def loadgen_issuing(out: Path) -> bool:
    detail = out / "performance" / "mlperf_log_detail.txt"
    return detail.exists() and "generated_query_count" in detail.read_text(errors="replace")


def raylet_of(ip: str) -> psutil.Process | None:
    for p in psutil.process_iter():
        try:
            line = " ".join(p.cmdline())
        except psutil.Error:
            continue
        if "/raylet/raylet " in line and f"--node_ip_address={ip}" in line:
            return p
    return None


def worker_procs() -> list[int]:
    found = []
    for p in psutil.process_iter():
        try:
            if "RayWorkerProc" in " ".join(p.cmdline()):
                found.append(p.pid)
        except psutil.Error:
            continue
    return found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--node-ip", required=True, help="the node whose raylet dies")
    ap.add_argument("--after", type=float, default=30.0, help="seconds of issuing before the kill")
    ap.add_argument("--out", type=Path, required=True, help="the run's --output folder")
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--start-timeout-s", type=float, default=900.0)
    ap.add_argument("--timeout-s", type=float, default=600.0)
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        ap.error("the run command goes after --")
    if raylet_of(args.node_ip) is None:
        print(f"error: no raylet of node {args.node_ip} on this machine", file=sys.stderr)
        return 2

    log = args.json.with_suffix(".log").open("w")
    t_start = time.monotonic()
    proc = subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    doc: dict = {"cmd": cmd, "node_ip": args.node_ip, "after_s": args.after}
    try:
        while not loadgen_issuing(args.out):
            if proc.poll() is not None:
                doc["ended_before_issuing"] = proc.returncode
                break
            if time.monotonic() - t_start > args.start_timeout_s:
                doc["ended_before_issuing"] = "start timeout"
                break
            time.sleep(1)
        else:
            doc["issuing_after_s"] = round(time.monotonic() - t_start, 1)
            time.sleep(args.after)
            raylet = raylet_of(args.node_ip)
            doc["workers_before"] = len(worker_procs())
            t_kill = time.monotonic()
            if raylet is not None:
                raylet.kill()
            doc["killed_raylet_pid"] = raylet.pid if raylet else None
            try:
                proc.wait(timeout=args.timeout_s)
                doc["end_after_kill_s"] = round(time.monotonic() - t_kill, 2)
            except subprocess.TimeoutExpired:
                doc["hung"] = True
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        stderr = proc.stderr.read() if proc.stderr else ""
        log.close()
    doc["exit_status"] = proc.returncode
    doc["error_lines"] = [ln for ln in stderr.splitlines() if ln.startswith("error: ")]
    doc["traceback"] = "Traceback" in stderr
    args.json.with_suffix(".stderr.txt").write_text(stderr[-20000:])
    result = args.out / "result.json"
    if result.exists():
        r = json.loads(result.read_text())
        stats = r.get("sut_stats") or {}
        doc["result"] = {
            "status": r.get("status"),
            "error": r.get("error"),
            "issued": stats.get("issued"),
            "completed": stats.get("completed"),
            "failed_samples": stats.get("failed_samples"),
            "cluster_nodes_alive": (r.get("cluster") or {}).get("nodes_alive"),
        }
    time.sleep(10)
    doc["ray_workers_left_10s_later"] = len(worker_procs())
    args.json.write_text(json.dumps(doc, indent=2))
    for k, v in doc.items():
        if k != "cmd":
            print(f"fault: {k}: {v}")
    return 0 if doc.get("end_after_kill_s") is not None else 1


if __name__ == "__main__":
    sys.exit(main())
