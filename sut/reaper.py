"""Stopping processes: SIGTERM, a grace period, then SIGKILL for whatever is left.

One function for every place that ends processes (the SUT's engine reaper, the orphan guard,
a child command's process group), so they stop them the same way. It imports nothing of this
project, so the harness's lowest layer (harness.proc) may use it too.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Sequence
from typing import Any


def terminate_then_kill(
    procs: Sequence[Any],
    grace_s: float,
    *,
    kill_wait_s: float | None = None,
    group: int | None = None,
    continue_stopped: bool = False,
    kill_at_once: bool = False,
) -> list[Any]:
    """SIGTERM each of `procs` (psutil.Process), wait up to `grace_s` for them to end, SIGKILL
    those left and wait up to `kill_wait_s` (default `grace_s`) for those. `group`: a process
    group signalled the same way, for its members that are not in `procs` (an orphan left in
    the group). `continue_stopped`: SIGCONT after the SIGTERM, since a stopped process only
    acts on it once continued. `kill_at_once`: SIGKILL without the SIGTERM. Returns the
    processes that had to be killed."""
    import psutil

    still = list(procs)
    if not kill_at_once:
        _signal_group(group, signal.SIGTERM)
        for p in still:
            with contextlib.suppress(psutil.Error):
                p.terminate()
                if continue_stopped:
                    p.resume()
        _, still = psutil.wait_procs(still, timeout=grace_s)
    _signal_group(group, signal.SIGKILL)
    for p in still:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(still, timeout=grace_s if kill_wait_s is None else kill_wait_s)
    return still


def _signal_group(group: int | None, signum: signal.Signals) -> None:
    if group is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signum)
