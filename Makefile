# Set-up and the two commands README names: `make quickstart` and `make test`.
# Everything installs into .venv; torch==2.13.0 comes first, because a plain
# `torch` requirement without torch installed would pull a multi-GB CUDA build.
# First-run time (docs/validation.md, "Set-up and the test suite"): pip is upgraded only when the
# venv's is older than 23; nothing is byte-compiled at install (--no-compile: byte-
# compiling all of torch took longer than installing it; a module is compiled when
# first imported, and its .pyc kept unless PYTHONDONTWRITEBYTECODE is set: `venv`
# compiles everything for the suite); the package builds against the venv's setuptools
# (--no-build-isolation: no second environment to create and fill).

PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python

.PHONY: package venv quickstart test fuzz sanitize lint cuda-check clean

$(VPY):
	$(PYTHON) -m venv $(VENV)
	$(VPY) -c 'import pip, sys; sys.exit(int(pip.__version__.split(".")[0]) < 23)' \
		|| $(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q --no-compile torch==2.13.0 "setuptools>=77"

# The package alone: all a quickstart needs (a first run installs nothing more).
package: $(VPY)
	$(VPY) -m pip install -q --no-compile --no-build-isolation .

# Everything the suite, lint and CI need, added to the same .venv. The library
# integrations' extras come pinned (.ci/integrations-constraints.txt), torch
# included, so pip never replaces the torch installed above.
# Then everything installed is byte-compiled, torch's first: a machine that sets
# PYTHONDONTWRITEBYTECODE (this one and CI do) never writes a .pyc on import, so every
# process of the suite compiled torch._dynamo, sympy and co. from source again (4.7 s of
# CPU for `import torch._dynamo`, 1.3 s compiled; docs/validation.md). Files that do not
# compile stay as they are (quiet=2): importing one would fail either way.
# Last, DeepSpeed's shm comm op is built into the venv (about 45 s of CPU, once): every
# DeepSpeed rank on CPU loads it, and the suite finds it there (tests/deepspeed_ops.py).
# Done again only when what it installs changed (VENV_INPUTS: the package is installed as
# a copy, so its sources are inputs too): `.ci/run`'s targets each need `venv`, and each
# redo cost 10.5 s with nothing to do.
VENV_READY := $(VENV)/.trainparity-venv-ready
VENV_INPUTS := pyproject.toml setup.py Makefile .ci/integrations-constraints.txt \
	tests/deepspeed_ops.py \
	$(shell find python src quickstarts csrc -type f -not -path '*/__pycache__/*' \
		-not -name '*.pyc' -not -name '*.so' -not -name '*.o' 2>/dev/null)
venv: $(VENV_READY)
$(VENV_READY): $(VPY) $(VENV_INPUTS)
	$(VPY) -m pip install -q -c .ci/integrations-constraints.txt ".[test,integrations]" ruff setuptools
	$(VPY) -c 'import compileall, sysconfig; compileall.compile_dir(sysconfig.get_paths()["purelib"], quiet=2, workers=0)'
	$(VPY) -m tests.deepspeed_ops
	touch $@

# Warm (docs/limitations.md, "Warm starts"): every child of a check is forked from one
# server that imported torch once. PYTHONHASHSEED lets the phases share that server; the
# reports are the ones a fresh run gives (the suite's pins hold in both modes).
quickstart: package
	TRAINPARITY_START=warm PYTHONHASHSEED=0 $(VPY) -m trainparity.quickstarts.resume

# Ends with the 10 slowest tests: the suite's time budget at a glance (docs/validation.md).
# Two workers (pytest-xdist), each taking whole modules (--dist loadfile: a module's shared
# fixtures run once, and its tests never run beside each other). The serial suite kept
# about 1.3 of 2 cores busy, much of it waiting on one child at a time.
# The system packages some tests need (chromium, slurm-wlm, munge) are installed first where
# this machine allows (.ci/system-packages.sh: apt-get as root or with sudo); elsewhere those
# tests skip with one summary line, or fail under CI=true.
TEST_WORKERS ?= 2
test: venv
	bash .ci/system-packages.sh
	$(VPY) -m pytest -q --durations=10 -n $(TEST_WORKERS) --dist loadfile

# The fuzzers (tests/fuzz, and the core's malformed-input fuzzer) with many random
# examples each; `make test` runs the same fuzzers bounded and derandomized.
# Failing inputs are kept in .hypothesis/ and replayed first next time.
FUZZ_EXAMPLES ?= 5000
fuzz: venv
	TRAINPARITY_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(VPY) -m pytest -q \
		tests/fuzz tests/ccore/test_core_malformed_inputs.py

# The C core built with AddressSanitizer + UBSan, and its tests run against it.
sanitize: venv
	rm -rf build/asan build/asan-tmp
	TRAINPARITY_SANITIZE=1 $(VPY) setup.py -q build_ext --build-lib build/asan --build-temp build/asan-tmp
	LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libubsan.so)" \
	ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	TRAINPARITY_CORE_PATH="$$(ls build/asan/trainparity/_trainparity*.so)" \
	$(VPY) -m pytest -q -p no:cacheprovider -p no:trainparity tests/ccore

lint: venv
	$(VENV)/bin/ruff check python quickstarts tests benchmarks setup.py
	$(VENV)/bin/ruff format --check python quickstarts tests benchmarks setup.py

# The CUDA sources checked without a GPU: each .cu compiled by nvcc for sm_90 plus
# compute_90 PTX (skipped with a message where there is no nvcc), and the torch
# binding's syntax checked against torch's and Python's headers. Nothing runs.
NVCC ?= $(shell command -v nvcc || echo /usr/local/cuda/bin/nvcc)
CXX ?= c++
CUDA_FLAGS := -std=c++17 -O3 --fmad=false -Werror all-warnings \
	-Xcompiler -ffp-contract=off,-Wall,-Wextra \
	-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
TORCH_HEADERS = $$($(VPY) -c 'import sysconfig, torch.utils.cpp_extension as c; \
	print(" ".join("-isystem " + p for p in [*c.include_paths(), sysconfig.get_paths()["include"]]))')

cuda-check: venv
	@mkdir -p build/cuda-check
	@if [ -x "$(NVCC)" ]; then \
		for source in csrc/cuda/compare.cu csrc/cuda/digest.cu csrc/cuda/summary.cu; do \
			echo "nvcc -c $$source (sm_90 + compute_90 PTX)"; \
			"$(NVCC)" -c $(CUDA_FLAGS) $$source -o build/cuda-check/$$(basename $$source .cu).o || exit 1; \
		done; \
	else \
		echo "cuda-check: no nvcc found (set NVCC=...): the .cu files were not compiled"; \
	fi
	@echo "$(CXX) -fsyntax-only csrc/cuda/binding.cpp (torch and Python headers)"
	@$(CXX) -std=c++17 -fsyntax-only -Wall -Wextra -Werror \
		-DTORCH_EXTENSION_NAME=trainparity_cuda_kernels -Icsrc/cuda $(TORCH_HEADERS) \
		csrc/cuda/binding.cpp

clean:
	rm -rf $(VENV) build *.egg-info
