"""`python -m trainparity._internal.why.forensics.launch SCRIPT [ARGS...]` (or `-m MODULE`): run a script, tracing one step.

`trainparity trace` runs the training command through this: it installs the
step tracer from the environment (TRAINPARITY_TRACE_STEP, ..._OUTPUT,
..._KEEP), then runs the script as `python SCRIPT ARGS` would.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

from trainparity._internal.why.forensics.step_trace import TraceStepError, install_from_environment


def main(argv: list[str]) -> None:
    if not argv or argv[0] in ("-h", "--help"):
        raise SystemExit(
            "usage: python -m trainparity._internal.why.forensics.launch SCRIPT [ARGS] | -m MODULE [ARGS]"
        )
    tracer = install_from_environment()
    try:
        if argv[0] == "-m" and len(argv) > 1:
            sys.argv = [argv[1], *argv[2:]]
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(argv)
            sys.path.insert(0, str(Path(argv[0]).resolve().parent))  # as `python SCRIPT` does
            runpy.run_path(argv[0], run_name="__main__")
    except TraceStepError as error:  # the script's record() calls cannot delimit the step
        raise SystemExit(f"trainparity: no trace written: {error}") from None
    finally:
        if tracer is not None:
            # The script ended inside the traced step or before it: close the session
            # without writing a partial trace, and say why there is none.
            tracer.finish()


if __name__ == "__main__":
    main(sys.argv[1:])
