"""Packages a process of ours would import for nothing, reported missing before anything can.

transformers and NLTK import scikit-learn and SciPy whenever they are installed, for what this
tool never runs: transformers for assisted generation's candidate generator, image processors
and detection losses; NLTK for its classifiers and parsers. MLflow's server requires both
installed, so every command paid for them: importing vLLM as a Server run does took 9.12 CPU-s
with them, 7.75 without; NLTK's sentence splitter (the accuracy scoring's) 2.10, 0.41 without
(bench/unused_imports.py). vLLM needs neither (its audio resampling falls back without
SciPy), and both libraries ask before they import (a missing package turns the feature off).

Hidden by `sys.modules[name] = None`: importlib's `find_spec` then answers None and an import
raises ImportError. Each command's process hides them first (harness.cli), and so does every
path into vLLM (sut.engine.import_vllm) and a spawned front-end worker (sut.engine_worker), for
processes that are not a command's. A host process that calls the CLI's `main()` or builds an
engine in-process and needs them imports them first: a package already imported is kept.
"""

from __future__ import annotations

import sys

UNUSED_PACKAGES = ("sklearn", "scipy")
# Those that look for them: once one is imported it may have found them, and hiding them then
# would fail its later import of them.
LOOKING = ("transformers", "nltk")


def hide_unused_packages() -> None:
    """UNUSED_PACKAGES reported missing to this process, unless a library of LOOKING is imported
    already; a package this process imported is kept."""
    if any(name in sys.modules for name in LOOKING):
        return
    for name in UNUSED_PACKAGES:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]
