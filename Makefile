# Set-up and the two commands README names: `make quickstart` and `make test`.
# Everything installs into .venv; torch==2.13.0 comes first, because a plain
# `torch` requirement without torch installed would pull a multi-GB CUDA build.

PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python

.PHONY: venv quickstart test sanitize lint clean

$(VPY):
	$(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q torch==2.13.0

venv: $(VPY)
	$(VPY) -m pip install -q ".[test]" ruff setuptools

quickstart: venv
	$(VPY) -m trainparity.quickstarts.resume

test: venv
	$(VPY) -m pytest -q

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

clean:
	rm -rf $(VENV) build *.egg-info
