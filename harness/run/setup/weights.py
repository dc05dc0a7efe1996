"""The model folder's weights, checked before an engine starts.

vLLM finds a checkpoint's weight files only inside its engine core, tens of seconds into an
engine start, and reports a missing or truncated file there as a traceback from another
process. The same search, made here in milliseconds, turns the two usual causes (a folder with
a config and a tokenizer but no weights; a shard cut short by a download) into one line.

The search follows vLLM's default loader per `load_format`: which file patterns it reads, in
which order (the first pattern with files wins), and the safetensors index that names the
shards. Formats whose weights live elsewhere (tensorizer, streaming loaders) are not checked.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

from harness.errors import UsageError

# load_format -> the patterns vLLM's loader reads, in its order
PATTERNS: dict[str, tuple[str, ...]] = {
    "auto": ("*.safetensors", "*.bin", "*.pt"),
    "hf": ("*.safetensors", "*.bin", "*.pt"),
    "safetensors": ("*.safetensors",),
    "fastsafetensors": ("*.safetensors",),
    "instanttensor": ("*.safetensors",),
    "mistral": ("consolidated*.safetensors",),
    "pt": ("*.pt",),
    "npcache": ("*.bin", "*.pt"),
    "bitsandbytes": ("*.safetensors", "*.bin", "*.pt"),
    "sharded_state": ("*.safetensors",),
    "gguf": ("*.gguf",),
}
# files vLLM's loader leaves out (not weights of the model)
NOT_WEIGHTS = {"training_args.bin", "optimizer.bin", "optimizer.pt", "scheduler.pt", "scaler.pt"}
INDEX = {"mistral": "consolidated.safetensors.index.json"}
DEFAULT_INDEX = "model.safetensors.index.json"
FIX = "put the checkpoint's weight files there (or pass --engine-arg load_format=dummy for random weights)"


def weight_files(model: Path, load_format: str) -> list[Path] | None:
    """The files vLLM would load (None: a format this check does not know)."""
    if load_format == "auto" and any(model.glob("consolidated*.safetensors")):
        load_format = "mistral"
    patterns = PATTERNS.get(load_format)
    if patterns is None:
        return None
    for pattern in patterns:
        found = sorted(p for p in model.glob(pattern) if p.is_file() and p.name not in NOT_WEIGHTS)
        if found:
            return found
    return []


def check_model_weights(model: Path, load_format: str) -> None:
    """Raise UsageError when vLLM would find no weights, a shard the index names is missing, or
    a safetensors file is shorter than its own header says."""
    if load_format == "dummy" or not model.is_dir():
        return
    files = weight_files(model, load_format)
    if files is None:
        return
    if not files:
        wanted = " or ".join(PATTERNS.get(load_format, PATTERNS["auto"]))
        raise UsageError(
            f"model {model} has no weight files vLLM can load with load_format {load_format} "
            f"(it looks for {wanted}): {FIX}"
        )
    fmt = "mistral" if files[0].name.startswith("consolidated") else load_format
    index = model / INDEX.get(fmt, DEFAULT_INDEX)
    if files[0].suffix == ".safetensors" and index.is_file():
        try:
            shards = set(json.loads(index.read_text())["weight_map"].values())
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            raise UsageError(
                f"model {model}: {index.name} is not a readable safetensors index: replace it "
                "with the checkpoint's own"
            ) from None
        missing = sorted(s for s in shards if not (model / s).is_file())
        if missing:
            shown = ", ".join(missing[:3]) + (
                f" and {len(missing) - 3} more" if len(missing) > 3 else ""
            )
            raise UsageError(
                f"model {model}: {index.name} names {len(shards)} shards and {len(missing)} "
                f"are missing ({shown}): copy the missing shards in"
            )
    for f in files:
        if f.suffix == ".safetensors":
            _check_safetensors(f)


def _check_safetensors(path: Path) -> None:
    """A safetensors file is an 8-byte header length, a JSON header of tensor offsets, then
    the data: a file shorter than its header says was cut short."""
    size = path.stat().st_size
    problem = None
    try:
        with open(path, "rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                problem = f"is {size} bytes long, too short for a safetensors header"
            else:
                (n,) = struct.unpack("<Q", head)
                if n > size - 8:
                    problem = f"is {size} bytes long but its header alone claims {n}"
                else:
                    header = json.loads(fh.read(n))
                    end = max(
                        (
                            int(v["data_offsets"][1])
                            for k, v in header.items()
                            if k != "__metadata__"
                        ),
                        default=0,
                    )
                    if 8 + n + end > size:
                        problem = (
                            f"holds {size:,} bytes of the {8 + n + end:,} its header describes"
                        )
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError, struct.error):
        problem = "is not a readable safetensors file"
    if problem:
        raise UsageError(
            f"model weights {path} {problem}: the file was cut short or is not safetensors; "
            "copy it again from the checkpoint"
        )
