"""One LoadGen accuracy test over a SUT whose engine is a small test double, with one fault
injected: `python -m tests.fault_sut CASE OUT` prints `FAULT_RESULT {json}`.

The faults here cannot be caused on a real engine on demand (an exception inside our
completion reporting, inside `add_request`, a step that never returns), so the engine is a
double that answers each prompt with a few token ids. Everything else is real: the SUT
classes, the ledger, the runner's LoadGen thread and watchdog, LoadGen itself and its logs.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

N_SAMPLES = 24
FAULT_AT = 3  # the call that fails
TOKENS = 4
STALL_S = 2.0


# The engine hangs at FAULT_AT; in the -worker-died cases a process of the engine (here a child
# started while the run holds the engine's output, as vLLM's processes are) logs what vLLM's
# executor logs when a worker dies, and no stall limit is set: the line alone must end the test
# (on GPUs, with pipeline parallel, vLLM's engine core sat 300 s in its step after that line).
HANGS = ("offline-stall", "server-stall", "offline-worker-died", "server-worker-died")
WORKER_DIED = (
    "(EngineCore pid=16364) ERROR 11-28 01:40:35 [ray_executor_v2.py:514] "
    "RayWorkerProc rank=[2] died unexpectedly, shutting down executor."
)
DIED_AFTER_S = 1.5


class Fault(RuntimeError):
    """The injected failure."""


def _output(request_id: str, ids: list[int], finished: bool) -> SimpleNamespace:
    return SimpleNamespace(
        request_id=request_id,
        finished=finished,
        outputs=[SimpleNamespace(token_ids=ids)],
    )


class FakeEngine:
    """`LLM.llm_engine`'s request loop: add_request, step (a few requests finish per step)."""

    def __init__(self, case: str):
        self.case = case
        self.vllm_config = None
        self.waiting: list[tuple[str, list[int]]] = []
        self.adds = 0
        self.steps = 0

    def add_request(self, request_id, prompt, params) -> None:
        self.adds += 1
        if self.case == "offline-add-request" and self.adds == FAULT_AT:
            raise Fault("add_request failed")
        ids = list(prompt["prompt_token_ids"])
        self.waiting.append((request_id, [1 + (ids[0] + k) % 50 for k in range(TOKENS)]))

    def step(self) -> list[SimpleNamespace]:
        self.steps += 1
        if self.case == "offline-step" and self.steps == FAULT_AT:
            raise Fault("engine step failed")
        if self.case in HANGS and self.steps == FAULT_AT:
            threading.Event().wait()  # a collective that never returns
        time.sleep(0.01)
        done, self.waiting = self.waiting[:5], self.waiting[5:]
        return [_output(rid, ids, True) for rid, ids in done]


class FakeAsyncEngine:
    """`AsyncLLM.generate` streaming DELTA outputs, one token per step."""

    def __init__(self, case: str):
        self.case = case
        self.vllm_config = None
        self.errored = False
        self.calls = 0

    async def generate(self, prompt, params, request_id):
        self.calls += 1
        call = self.calls
        if self.case == "server-generate" and call == FAULT_AT:
            raise Fault("generate failed")
        ids = list(prompt["prompt_token_ids"])
        for k in range(TOKENS):
            await asyncio.sleep(0.005)
            if self.case in HANGS and call >= FAULT_AT and k == 1:
                await asyncio.Event().wait()  # an engine that stopped producing
            yield _output(request_id, [1 + (ids[0] + k) % 50], k == TOKENS - 1)

    def shutdown(self) -> None:
        pass


def _fail_on_call(module, name: str, at: int) -> None:
    real = getattr(module, name)
    calls = [0]

    def wrapper(*args, **kwargs):
        calls[0] += 1
        if calls[0] == at:
            raise Fault(f"{name} failed")
        return real(*args, **kwargs)

    setattr(module, name, wrapper)


def _settings(lg, streaming: bool):
    s = lg.TestSettings()
    s.scenario = lg.TestScenario.Server if streaming else lg.TestScenario.Offline
    s.mode = lg.TestMode.AccuracyOnly
    s.server_target_qps = 200
    s.offline_expected_qps = 100
    s.min_duration_ms = 0
    s.min_query_count = N_SAMPLES
    s.use_token_latencies = True
    return s


def main(case: str, out: Path) -> None:
    import mlperf_loadgen as lg

    from harness.run.execute.loadgen_call import EngineFailure, run_loadgen_test
    from harness.run.record.engine_log import EngineStartLog
    from harness.run.setup.settings import build_log_settings
    from sut import responses
    from sut.qsl import TokenQSL

    if case.endswith("-report"):
        _fail_on_call(responses, "complete_samples", FAULT_AT)
    if case.endswith("-first-token"):
        _fail_on_call(responses, "complete_first_tokens", FAULT_AT)
    prompts = [[i + 1, 7, 9] for i in range(N_SAMPLES)]
    streaming = case.startswith("server")
    sut: object
    if streaming:
        from sut.server import ServerSUT

        sut = ServerSUT(lambda: FakeAsyncEngine(case), prompts, None)
    else:
        from sut.offline import OfflineSUT

        sut = OfflineSUT(SimpleNamespace(llm_engine=FakeEngine(case)), prompts, None)
    qsl = TokenQSL(prompts)
    died = case.endswith("-worker-died")
    start_log, logger = None, None
    if died:
        start_log = EngineStartLog.begin()
        logger = subprocess.Popen(  # inherits the held stdout, as the engine's processes do
            [
                sys.executable,
                "-c",
                f"import time; time.sleep({DIED_AFTER_S}); print({WORKER_DIED!r})",
            ]
        )
        start_log.started(out / "engine.log")
    t0 = time.monotonic()
    raised = None
    try:
        run_loadgen_test(
            lg,
            sut,
            qsl,
            _settings(lg, streaming),
            build_log_settings(out),
            out / "no-audit.config",
            "accuracy",
            None if died else STALL_S,
            fatal=start_log.fatal if start_log else None,
        )
    except EngineFailure as exc:
        raised = str(exc)
    elapsed = time.monotonic() - t0
    if logger is not None and start_log is not None:
        logger.wait(10)
        start_log.close()
    sut.stop(10.0)  # type: ignore[attr-defined]
    qsl.destroy()
    report = {
        "error": repr(sut.error),  # type: ignore[attr-defined]
        "raised": raised,
        "elapsed_s": round(elapsed, 2),
        "stats": dict(vars(sut.stats)),  # type: ignore[attr-defined]
        "in_flight": sut.ledger.in_flight,  # type: ignore[attr-defined]
        "threads": [t.name for t in threading.enumerate() if t is not threading.main_thread()],
    }
    print("FAULT_RESULT " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
