# compactd: two set-up commands, `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
EXTRAS := llama,mlx,models,dev
DEMO_TRACE := tests/fixtures/sweagent_marshmallow-code__marshmallow-1867.function_calling_replace_from_source.traj

# llama-cpp-python has no Linux wheel: pip compiles llama.cpp once (~16 min on 2 cores) and
# caches the wheel. Build a lean, portable x86-64-v3 library: no tools/examples/server, and no
# -march=native (a native build enables AMX on some Xeons, which crashed here, and a cached
# native wheel breaks on another CPU).
UNAME_M := $(shell uname -m)
UNAME_S := $(shell uname -s)
LLAMA_CMAKE_ARGS := -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF
ifeq ($(UNAME_S)-$(UNAME_M),Linux-x86_64)
LLAMA_CMAKE_ARGS += -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
endif
# A GPU build where there is a GPU: CUDA when nvidia-smi lists a GPU and nvcc is installed (a
# toolkit alone, as on CPU-only CI images, is not enough: a CUDA compile there costs an hour for
# nothing); every layer is then offloaded (backends/llama_cpp.py). Metal on Apple Silicon, where
# MLX is the default engine anyway. pip keys its wheel cache by the sdist alone, so a CUDA wheel
# gets a cache of its own.
HAS_GPU := $(shell nvidia-smi -L 2>/dev/null | grep -q GPU && echo 1)
NVCC := $(if $(HAS_GPU),$(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null))
PIP_ENV :=
ifneq ($(NVCC),)
LLAMA_CMAKE_ARGS += -DGGML_CUDA=ON
PIP_ENV := CUDACXX=$(NVCC) PIP_CACHE_DIR=$(HOME)/.cache/compactd-pip-cuda
endif
ifeq ($(UNAME_S)-$(UNAME_M),Darwin-arm64)
LLAMA_CMAKE_ARGS += -DGGML_METAL=ON
endif
NPROC := $(shell nproc 2>/dev/null || sysctl -n hw.ncpu 2>/dev/null || echo 2)

# The page's browser tests drive Debian's Chromium (Playwright's own browser download is not
# reachable); a CJK font so that its screenshots show Chinese. Installed where it is missing and
# we are root with apt-get; elsewhere the browser tests skip and say why.
BROWSER_PKGS := chromium fonts-wqy-microhei

.PHONY: install browser demo test bench lint clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	@echo "Installing compactd (first time: llama.cpp compiles for ~16 min on 2 cores; later installs reuse pip's cached wheel)"
	$(PIP_ENV) CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" CMAKE_BUILD_PARALLEL_LEVEL=$(NPROC) $(BIN)/python -m pip install -q -e ".[$(EXTRAS)]"
	touch $(STAMP)

install: $(STAMP)

browser:
	@if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "Installing Chromium for the page's browser tests (apt-get install $(BROWSER_PKGS))"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(BROWSER_PKGS) >/dev/null) \
	    || echo "Chromium could not be installed: the page's browser tests will be skipped"; \
	else echo "No Chromium, and not root with apt-get: the page's browser tests will be skipped"; fi

demo: install
	$(BIN)/compactd models
	$(BIN)/compactd compact $(DEMO_TRACE) --context-limit 12000 --save
	@echo "Now: $(BIN)/compactd serve, and open http://127.0.0.1:7433/ to see what this compaction kept and dropped"

test: install browser
	$(BIN)/python -m pytest -q

bench: install
	$(BIN)/compactd bench all

lint: install
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
