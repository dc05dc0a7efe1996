"""The platform class of mlperf_vllm_test_ray (a module of its own: vLLM imports it only once
its platform plugins have been discovered)."""

from vllm.platforms.cpu import CpuPlatform


class RayDeviceCpuPlatform(CpuPlatform):
    ray_device_key = "GPU"  # the slot each test node declares with `ray start --num-gpus 1`
    # Ray would set CUDA_VISIBLE_DEVICES for each worker; a CPU worker has no use for it
    ray_noset_device_env_vars = ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"]
