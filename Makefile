# pt2onnx developer commands. `make demo` and `make test` install whatever is
# missing first (Debian packages via apt-get, Python packages via pip).
PYTHON ?= python3
JOBS ?= $(shell nproc)
CPP_BUILD := build/cpp
APT_PACKAGES := libsimdjson-dev libgtest-dev clang-format
STAMP := build/.deps-stamp

.PHONY: all deps build python cpp demo test test-quick test-cpp test-python format format-check clean

all: build

# Dependencies: re-checked when the requirement files change.
deps: $(STAMP)
$(STAMP): requirements-dev.txt Makefile
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi
	$(PYTHON) -m pip install -q -r requirements-dev.txt
	@mkdir -p build && touch $(STAMP)

# The Python package (nanobind extension built by scikit-build-core; the
# build directory persists, so rebuilds are incremental).
python: deps
	PT2ONNX_WERROR=ON $(PYTHON) -m pip install -q --no-build-isolation -e .

# C++ library, CLI and GoogleTest suite.
cpp: deps
	cmake -S . -B $(CPP_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DPT2ONNX_TESTS=ON -DPT2ONNX_WERROR=ON >/dev/null
	cmake --build $(CPP_BUILD) -j $(JOBS)

build: python cpp

demo: python
	$(PYTHON) -m pt2onnx.demo

test-cpp: cpp
	ctest --test-dir $(CPP_BUILD) --output-on-failure -j $(JOBS)

test-python: python cpp
	PT2ONNX_CLI=$(CPP_BUILD)/pt2onnx $(PYTHON) -m pytest tests/python -q

test: test-cpp test-python

# Everyday loop: skips the tests marked slow (the >2 GB export).
test-quick: test-cpp python
	PT2ONNX_CLI=$(CPP_BUILD)/pt2onnx $(PYTHON) -m pytest tests/python -q -m "not slow"

FORMAT_FILES = $(shell git ls-files '*.cpp' '*.h')
format:
	clang-format -i $(FORMAT_FILES)
format-check:
	clang-format --dry-run --Werror $(FORMAT_FILES)

clean:
	rm -rf build
