"""What a run records about the machine that ran it (environment.json's `machine`), which
`package` copies into a submission's system json."""

from __future__ import annotations

import os

from harness.run.record.environment import cores_per_processor, machine_facts


def _cpuinfo(sockets: int, cores: int, threads: int, *, cpu_cores_line: bool) -> str:
    blocks, n = [], 0
    for package in range(sockets):
        for core in range(cores):
            for _ in range(threads):
                lines = [f"processor\t: {n}", f"physical id\t: {package}", f"core id\t\t: {core}"]
                if cpu_cores_line:
                    lines.append(f"cpu cores\t: {cores}")
                blocks.append("\n".join(lines))
                n += 1
    return "\n\n".join(blocks) + "\n"


def test_the_system_json_counts_the_cores_of_one_processor():
    """host_processor_core_count is one socket's physical cores (two 56-core Xeons with
    hyper-threading: 56, not the 224 hardware threads os.cpu_count() sees)."""
    assert cores_per_processor(_cpuinfo(2, 56, 2, cpu_cores_line=True)) == 56
    assert cores_per_processor(_cpuinfo(2, 56, 2, cpu_cores_line=False)) == 56
    assert cores_per_processor(_cpuinfo(1, 8, 1, cpu_cores_line=False)) == 8
    assert cores_per_processor("") == os.cpu_count()  # nothing to read: what the system says
    with open("/proc/cpuinfo") as fh:
        here = cores_per_processor(fh.read())
    assert machine_facts()["host_processor_core_count"] == str(here)
    assert 1 <= here <= (os.cpu_count() or 1)
