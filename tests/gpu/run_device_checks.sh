#!/usr/bin/env bash
# The GPU device check, one prepared run (at most ~9 minutes) on a machine with a CUDA GPU:
# builds the C core, runs a nondeterministic CUDA resume (index_add_ atomics) under the
# noise envelope, builds the CUDA kernels, runs the GPU tests (CPU/GPU identity, digest
# identity, launch-shape determinism, forensics CPU vs CUDA, and the CUDA-RNG resume fault when the resume
# suite has it), then benchmarks/bench_gpu_compare.py. Needs no network.
#
# Everything it produces goes under $OUT (default: a new temporary directory):
#   summary.txt   one line per step: name, exit status, seconds
#   env.txt       GPU, driver, python, torch, nvcc, ninja
#   *.log         each step's output; gpu_tests.xml: JUnit report of the GPU tests
#   bench.txt / bench.json   the benchmark's figures
# The exit status is 0 only when every step that ran succeeded.
set -uo pipefail
cd "$(dirname "$0")/../.."

OUT="${OUT:-$(mktemp -d)}"
mkdir -p "$OUT"
PYTHON="${PYTHON:-python3}"
BUDGET_SECONDS="${BUDGET_SECONDS:-520}"
STARTED=$SECONDS
FAILED=0
# Kernel builds are cached outside $OUT (what comes back from $OUT should stay small).
export TORCH_EXTENSIONS_DIR="${TORCH_EXTENSIONS_DIR:-${TMPDIR:-/tmp}/trainparity-torch-extensions}"
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
export TRAINPARITY_REQUIRE_CUDA_KERNELS=1
export PYTHONDONTWRITEBYTECODE=1

# run_step NAME CAP_SECONDS COMMAND...: runs COMMAND with at most CAP_SECONDS (and never
# past the overall budget), output to $OUT/NAME.log, one line in summary.txt.
run_step() {
    local name=$1 cap=$2
    shift 2
    local left=$((BUDGET_SECONDS - (SECONDS - STARTED)))
    if ((left < 10)); then
        echo "$name skipped: budget of ${BUDGET_SECONDS}s used up" | tee -a "$OUT/summary.txt"
        FAILED=1
        return 1
    fi
    ((cap > left)) && cap=$left
    local begin=$SECONDS
    timeout --signal=TERM --kill-after=10 "$cap" "$@" >"$OUT/$name.log" 2>&1
    local status=$?
    echo "$name exit=$status seconds=$((SECONDS - begin))" | tee -a "$OUT/summary.txt"
    ((status != 0)) && FAILED=1
    return $status
}

{
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || echo "nvidia-smi failed"
    "$PYTHON" -c 'import sys, torch; print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())'
    nvcc --version | tail -n 2 || echo "no nvcc on PATH"
    ninja --version || "$PYTHON" -c 'import ninja; print("ninja module", ninja.__version__)' || echo "no ninja"
    "$PYTHON" -c 'import pytest; print("pytest", pytest.__version__)' || echo "no pytest"
} >"$OUT/env.txt" 2>&1

# The C core: setuptools when present, else the compiler directly (Python 3.12 venvs may lack setuptools).
build_core() {
    if "$PYTHON" setup.py -q build_ext --inplace; then
        return 0
    fi
    echo "setup.py failed; compiling the core directly"
    local include suffix
    include=$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
    suffix=$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
    gcc -shared -fPIC -O3 -std=c11 -Wall -Wextra -Werror -pthread -D_GNU_SOURCE \
        -I"$include" -Isrc/_trainparity src/_trainparity/*.c \
        -o "python/trainparity/_trainparity$suffix"
}
run_step core_build 90 bash -c "$(declare -f build_core); PYTHON='$PYTHON' build_core"

# First after the core: it needs no kernels, and the envelope's CUDA case must not be squeezed out.
run_step noise_cuda_resume 200 "$PYTHON" -m pytest -q -s -p no:cacheprovider -rs \
    --junitxml="$OUT/noise_tests.xml" tests/gpu/test_gpu_noise.py

run_step kernel_build 300 "$PYTHON" -c '
import time
from trainparity._internal.native.cuda_kernels import build_kernels
start = time.perf_counter()
module = build_kernels(verbose=True)
print(f"built {module.__file__} in {time.perf_counter() - start:.1f} s")
'

run_step gpu_tests 150 "$PYTHON" -m pytest -q -p no:cacheprovider -rs \
    --junitxml="$OUT/gpu_tests.xml" tests/gpu --ignore=tests/gpu/test_gpu_noise.py \
    tests/test_cuda_backend.py

if [[ -f tests/test_resume_faults.py ]]; then
    run_step resume_cuda_rng 90 "$PYTHON" -m pytest -q -p no:cacheprovider -rs \
        tests/test_resume_faults.py -k cuda_rng
else
    echo "resume_cuda_rng skipped: tests/test_resume_faults.py is not in this tree" | tee -a "$OUT/summary.txt"
fi

run_step bench 180 "$PYTHON" benchmarks/bench_gpu_compare.py --json "$OUT/bench.json"
cp "$OUT/bench.log" "$OUT/bench.txt" 2>/dev/null

echo "total seconds=$((SECONDS - STARTED)) failed=$FAILED" | tee -a "$OUT/summary.txt"
exit $FAILED
