#!/usr/bin/env bash
# Creates a separate virtual environment with the original TrainParity 0.1.0, run
# only as a black box (its own processes) by the benchmarks that compare against it.
# Prints the path of that environment's python. Never import it beside ours.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="${TRAINPARITY_REFERENCE_VENV:-$here/.reference-venv}"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import trainparity" 2>/dev/null; then
    python3 -m venv "$venv" >&2
    "$venv/bin/pip" install -q torch==2.13.0 >&2
    "$venv/bin/pip" install -q trainparity==0.1.0 numpy >&2
fi
echo "$venv/bin/python"
