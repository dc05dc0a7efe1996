"""One vLLM engine (tiny model, CPU) under our prefill policy, switched live through its control
file: `python -m tests.scheduler_probe MODEL OUT.json POLICY [POLICY ...]` runs, per policy,
24 prompts of ~200 tokens at once and records what the engine itself reports per step: the
context (prefill) and generation tokens of vLLM's iteration details (`SchedulerStats.
iteration_details`, built by the engine core from its SchedulerOutput). Nothing here counts
tokens of its own.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path

PROMPTS = 24
PROMPT_LEN = 200
MAX_TOKENS = 12


def main(model: str, out: str, policies: list[str]) -> None:
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.sampling_params import RequestOutputKind
    from vllm.v1.metrics.loggers import StatLoggerBase

    from sut.engine import create_async_engine, make_engine_config
    from sut.scheduling import PrefillPolicy, write_control

    steps: list[tuple[int, int, int]] = []  # (iteration index, context tokens, generation tokens)

    class IterationRecorder(StatLoggerBase):
        def __init__(self, vllm_config, engine_index=0):
            pass

        def record(self, scheduler_stats, iteration_stats, mm_cache_stats=None, engine_idx=0):
            d = getattr(scheduler_stats, "iteration_details", None)
            if d is not None and not d.is_dummy:
                steps.append((d.iteration_index, d.num_ctx_tokens, d.num_generation_tokens))

        def log_engine_initialized(self):
            pass

    control = Path(tempfile.mkdtemp(prefix="policy-")) / "policy.json"
    write_control(control, PrefillPolicy.parse(policies[0]))
    overrides = {
        "max_num_seqs": 32,
        "max_num_batched_tokens": 512,
        "enable_logging_iteration_details": True,
        **PrefillPolicy(control_file=str(control)).engine_kwargs(),
    }
    # the engine as a run builds it: our defaults and layout (on the CPU, its engine core forked
    # with the worker inside it), so the scheduler is read back where runs use it
    config = make_engine_config(model, overrides)
    engine = create_async_engine(config, stat_loggers=[IterationRecorder])
    params = SamplingParams(
        temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True, output_kind=RequestOutputKind.DELTA
    )
    doc: dict = {
        "scheduler_cls": str(engine.vllm_config.scheduler_config.scheduler_cls),
        "async_scheduling": bool(engine.vllm_config.scheduler_config.async_scheduling),
        "phases": [],
    }

    async def one(i: int, tag: str) -> int:
        prompt = TokensPrompt(
            prompt_token_ids=[5 + (i * 7 + k) % 500 for k in range(PROMPT_LEN + i)]
        )
        n = 0
        async for out in engine.generate(prompt, params, f"{tag}-{i}"):
            n += len(out.outputs[0].token_ids)
        return n

    async def phase(tag: str) -> list[int]:
        return list(await asyncio.gather(*(one(i, tag) for i in range(PROMPTS))))

    async def all_phases() -> None:
        for k, text in enumerate(policies):
            write_control(control, PrefillPolicy.parse(text))
            # The engine core looks at the file at its first step after CONTROL_CHECK_S.
            await asyncio.sleep(0.5)
            steps.clear()
            tokens = await phase(f"p{k}")
            await asyncio.sleep(0.3)  # the last step's stats follow its outputs
            doc["phases"].append(
                {
                    "policy": text,
                    "tokens": tokens,
                    "prompt_tokens": [PROMPT_LEN + i for i in range(PROMPTS)],
                    "steps": list(steps),
                }
            )

    try:
        asyncio.run(all_phases())
    finally:
        engine.shutdown()
        engine = None  # dropped while the interpreter is whole (vLLM's __del__ shuts down again)
    Path(out).write_text(json.dumps(doc))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
