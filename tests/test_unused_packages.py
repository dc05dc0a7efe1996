"""sut.imports.hide_unused_packages: scikit-learn and SciPy reported missing to a process before
transformers or NLTK is imported, so that neither pays for them; never once one of those is in,
never over a package already imported. Each case in a fresh interpreter (the suite's own has
imported them). That a whole run works without them: test_server_e2e's run (performance,
accuracy scored with NLTK, TEST06) reports none of them imported."""

from __future__ import annotations

import pytest

from tests.conftest import fresh_report

CASES = {
    # transformers itself asked, as its optional imports ask
    "fresh": "",
    # a package the process imported before stays what it is
    "scipy imported before": "import scipy",
    # transformers or NLTK may have found them already: nothing is hidden then
    "transformers imported before": "sys.modules['transformers'] = types.ModuleType('transformers')",
    "nltk imported before": "sys.modules['nltk'] = types.ModuleType('nltk')",
}

SCRIPT = """
import importlib.util, json, sys, types
{before}
from sut.imports import UNUSED_PACKAGES, hide_unused_packages
hide_unused_packages()
report = {{"found": {{n: importlib.util.find_spec(n) is not None for n in UNUSED_PACKAGES}}}}
try:
    import sklearn
    report["import"] = "ok"
except ImportError as e:
    report["import"] = type(e).__name__
if "transformers" not in sys.modules and "nltk" not in sys.modules:
    from transformers.utils import is_scipy_available, is_sklearn_available
    report["asked"] = [is_sklearn_available(), is_scipy_available()]
    import nltk.classify.scikitlearn, nltk.parse.transitionparser  # NLTK's two that look
    report["nltk"] = [m for m in ("sklearn", "scipy") if sys.modules.get(m) is not None]
print(json.dumps(report))
"""


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_hidden_only_before_transformers_and_never_over_an_import(case):
    report = fresh_report(SCRIPT.format(before=CASES[case]))
    if case == "fresh":
        assert report == {
            "found": {"sklearn": False, "scipy": False},
            "import": "ModuleNotFoundError",
            "asked": [False, False],
            "nltk": [],
        }, report
    elif case == "scipy imported before":
        assert report["found"] == {"sklearn": False, "scipy": True}, report
        assert report["asked"] == [False, True], report
    else:
        assert report["found"] == {"sklearn": True, "scipy": True}, report
        assert report["import"] == "ok", report
