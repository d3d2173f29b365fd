"""The one table of tests and fixtures allowed past the suite's time budget, each with the reason.

The budget (tests/time_budget.py; 60 s in CI, .ci/run) fails the session when a single test
or fixture takes longer, unless it is listed here. A key is what the budget's summary
prints before the parenthesis: a test's node id ("tests/test_x.py::test_y", which covers
all its parametrizations, or one of them with its "[...]"), or a fixture as
"file::fixture name". The reason says why it cannot shrink now, with the time CI measured;
an entry goes once the summary says it stays within the budget. What justifies an entry:
CONTRIBUTING.md, "Keeping a test inside the budget".
"""

from __future__ import annotations

EXCEPTIONS: dict[str, str] = {
    "tests/test_deepspeed.py::runs": (
        "419 s of setup in CI (issue 52). 13 resume checks and 2 plain jobs of the DeepSpeed "
        "example project, every phase on 2 gloo ranks under the torchrun script or the "
        "deepspeed launcher, as docs/distributed.md tells users to run it: those scripts start "
        "their ranks fresh (no warm start, docs/limitations.md), each rank importing torch and "
        "deepspeed and running deepspeed.initialize (about 3 s of CPU), two checks at a time on "
        "2 cores. Every fault check runs the same clean baselines again: it shrinks when checks "
        "share baselines (issue 52, item 1). Splitting it into fixtures under 60 s would meet "
        "the budget's letter and save nothing."
    ),
    "tests/test_notebook.py::notebook_run": (
        "62 s of setup in CI (issue 52). docs/examples/notebook.ipynb executed as a user runs "
        "it, in one real Jupyter kernel, each cell using the ones before (the kernel's torch "
        "import, two warm checks sharing servers, a CommandCase check, an interrupted check "
        "and the plain kernel's fresh check after it): one execution is the evidence of all "
        "five tests of the module, and what it could shed is what the notebook demonstrates."
    ),
}
