"""A real `mlflow server` on 127.0.0.1 for tests: random free port, its own SQLite store and
artifact folder, stopped (its whole process group) when the block ends."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def mlflow_server(root: Path, startup_timeout_s: float = 180) -> Iterator[str]:
    root.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log_path = root / "server.log"
    mlflow_bin = Path(sys.executable).with_name("mlflow")
    cmd = [
        str(mlflow_bin),
        "server",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--backend-store-uri",
        f"sqlite:///{root / 'mlflow.db'}",
        "--artifacts-destination",
        str(root / "artifacts"),
        "--workers",
        "1",
    ]
    # No background job runner: these tests need the REST API and artifacts only.
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    env.pop("MLFLOW_TRACKING_URI", None)
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + startup_timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"mlflow server exited ({proc.returncode}): {log_path.read_text()[-2000:]}"
                )
            try:
                with urllib.request.urlopen(uri + "/health", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"mlflow server did not answer /health in "
                    f"{startup_timeout_s} s: {log_path.read_text()[-2000:]}"
                )
            time.sleep(0.5)
        yield uri
    finally:
        _stop(proc)


def _stop(proc: subprocess.Popen) -> None:
    """The server forks workers into its own session: stop that process group only."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(15)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
    with suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # stragglers of the same group
    if proc.poll() is None:
        proc.wait(10)
