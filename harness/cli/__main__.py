"""`python -m harness.cli`: the same entry point as the `mlperf-vllm` script."""

from harness.cli import entry

# The guard matters: vLLM starts its engine processes with spawn, which imports this module
# again (as __mp_main__) in every child.
if __name__ == "__main__":
    entry()
