# pt2onnx developer commands. `make demo` and `make test` install whatever is
# missing first (Debian packages via apt-get; Python packages via pip into the
# project environment .venv, never into the interpreter that runs make).
# PYTHON: the interpreter that creates .venv; PY: the environment's own, used for everything else.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The environment's commands (cmake, ninja, ctest from pip; pt2onnx's own) come first.
export PATH := $(abspath $(VENV))/bin:$(PATH)
JOBS ?= $(shell nproc)
# One compiler name for every build: CMake picks c++ where pip's builds (scikit-build-core) pick
# g++, and ccache keys on the name, so the C++ tests' build would miss the module build's objects.
export CXX ?= g++
# ccache hits across clones at other paths (CI's fresh checkouts): paths under the clone are
# hashed relative to it, and the working directory is left out of the hash of objects with debug
# info (the sanitizer build's line tables; debuggers then see the first clone's paths).
export CCACHE_BASEDIR ?= $(CURDIR)
export CCACHE_NOHASHDIR ?= 1
CPP_BUILD := build/cpp
APT_PACKAGES := libsimdjson-dev libgtest-dev libmimalloc-dev zlib1g-dev clang-format time ccache
# Inside the environment: removing .venv re-installs everything.
STAMP := $(VENV)/.deps-stamp
# The editable install of pt2onnx, redone when what it builds from changed: pip -e takes ~9 s
# with nothing to rebuild (pip's start-up, scikit-build-core's CMake run), and `make demo`,
# `make test`, `make docs` and `make bench-quick` each ask for it. Python modules are not
# inputs: the editable install serves python/pt2onnx from the source tree (new modules included).
# It does not see a new compiler or environment variables: `rm .venv/.pt2onnx-stamp` forces it.
PY_STAMP := $(VENV)/.pt2onnx-stamp
PY_INPUTS := CMakeLists.txt pyproject.toml $(shell find src include examples -type f 2>/dev/null)

.PHONY: all apt-deps apt-deps-later deps deps-clang build python cpp demo test test-quick test-exhaustive sweep-hf test-torch test-cpp test-python \
        sanitize-configure test-sanitize fuzz fuzz-cache bench bench-quick bench-deps bench-load bench-latency bench-pt2 bench-nodes bench-scale bench-sizes zoo coverage format format-check docs docs-stub docs-serve docs-browser-check \
        clean

all: build

# $(call apt_install,PACKAGES): installs the Debian packages not installed yet (apt-get, through
# sudo unless root); only a dpkg check when they are all there.
define apt_install
@missing=""; for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi
endef

# Dependencies: re-checked when the requirement files change.
deps: $(STAMP)
# The Debian packages alone (a dpkg check when they are there): format-check needs clang-format
# before anything else is installed (CI's first step on a fresh machine).
apt-deps:
	$(call apt_install,$(APT_PACKAGES))
$(STAMP): requirements-dev.txt Makefile tools/uv_install.sh tools/venv_hook/_pt2onnx_torchvision_hook.py | apt-deps
	@[ -x $(PY) ] || { echo "creating the project environment $(VENV)"; $(PYTHON) -m venv $(VENV); }
	@# By uv, with pip's configuration (tools/uv_install.sh: 6 s where pip took 23 s, and the
	@# byte code compiled on every core where pip compiles one file at a time).
	tools/uv_install.sh $(PY) -r requirements-dev.txt
	@# PyPI's torchvision is a CUDA build whose compiled ops do not load with the CPU torch: a
	@# start-up hook in .venv only lets `import torchvision` (and transformers) succeed anyway.
	tools/venv_hook/install.sh $(PY)
	@touch $(STAMP)

# clang + libFuzzer, only for `make fuzz`.
FUZZ_APT := clang-14 libclang-rt-14-dev
deps-clang:
	$(call apt_install,$(FUZZ_APT))

# The Python package (nanobind extension built by scikit-build-core; the
# build directory persists, so rebuilds are incremental).
python: $(PY_STAMP)
$(PY_STAMP): $(PY_INPUTS) $(STAMP)
	PT2ONNX_WERROR=ON $(PY) -m pip install -q --no-build-isolation -e .
	@touch $@

# C++ library, CLI and GoogleTest suite. The test sources compile at -O0 (the library they test
# keeps Release's -O3): g++ takes half the time or less on them (test_fusion_names_property.cpp
# 15.9 s at -O3, 6.3 s at -O0), and their 1,311 tests still run in under a second.
cpp: deps
	cmake -S . -B $(CPP_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DPT2ONNX_TESTS=ON -DPT2ONNX_WERROR=ON \
	  -DPT2ONNX_TEST_SOURCE_FLAGS=-O0 >/dev/null
	cmake --build $(CPP_BUILD) -j $(JOBS)

build: python cpp

demo: python
	$(PY) -m pt2onnx.demo

test-cpp: cpp
	ctest --test-dir $(CPP_BUILD) --output-on-failure -j $(JOBS)

# pytest-xdist workers (the OpInfo suite is most of the tests); --dist loadgroup keeps tests that
# share a capture on one worker (xdist_group: test_zoo.py's configurations of a model).
# --durations: the slowest tests in every log (CI's included). --max-worker-restart=0: a worker
# that dies (a crash in native code, the OOM killer) ends the run at once with the test it was
# running reported failed; pytest-xdist 3.8's loadgroup scheduler hangs after replacing a crashed
# worker (pytest-dev/pytest-xdist#1323 and #1327, fixed after 3.8, the newest release), which
# once held a CI run until its 90-minute limit.
PYTEST_JOBS ?= $(JOBS)
PYTEST_ARGS := -q -n $(PYTEST_JOBS) --dist loadgroup --max-worker-restart=0
PYTEST_DURATIONS ?= 25
test-python: python cpp
	$(PY) -m pytest tests/python tests/models $(PYTEST_ARGS) --durations=$(PYTEST_DURATIONS) \
	  -m "not exhaustive"

test: test-cpp test-python

# Everyday loop: skips the tests marked slow (the >2 GB export).
test-quick: test-cpp python
	$(PY) -m pytest tests/python tests/models $(PYTEST_ARGS) -m "not slow and not exhaustive"

# What is too long for CI: the zoo compiled with dynamic=True (about 35 minutes on 2 cores;
# its last results are in docs/guides/compile-backend.md) and exported with every input dim
# Dim.AUTO (docs/models.md); their quick entries run in `make test`.
test-exhaustive: test-cpp python
	$(PY) -m pytest tests/python tests/models $(PYTEST_ARGS) -m exhaustive --durations=$(PYTEST_DURATIONS)
	$(MAKE) sweep-hf

# Every model type of every optimum task's auto mapping, as a tiny checkpoint, through
# export_pretrained (bench/hf_tasks.py; hours on 2 cores): bench/hf_tasks.json and .md.
# SWEEP_ARGS="--tasks fill-mask" for some tasks only.
sweep-hf: python
	$(PY) bench/hf_tasks.py $(SWEEP_ARGS)

# The quick suite (the tests not marked slow: OpInfo opset 18 float32, the quick zoo, the
# detection models) under another torch release: TORCH=2.12.1 ... 2.14.1. Its environment
# (torch, the matching torchvision, requirements-dev.txt) is made once by tools/torch_venv.sh
# in the user's cache directory, keyed by its requirements (the CUDA builds are several GB: kept
# across clones); pt2onnx is installed there editable, built in build/torch-$(TORCH) (sharing
# .venv's build directory made each of the two reconfigure and relink it for the other: 8 s and
# 12 s; ccache serves the objects, nanobind's too: the build takes .venv's copy, the same release).
# CI runs it for the newest release.
TORCH ?= 2.14.1
test-torch: cpp
	@venv=$$(tools/torch_venv.sh $(TORCH)) && \
	PT2ONNX_WERROR=ON $$venv/bin/python -m pip install -q --no-build-isolation --no-deps \
	  -C build-dir=build/torch-$(TORCH) -C cmake.define.nanobind_ROOT=$$($(PY) -m nanobind --cmake_dir) \
	  -e . && \
	echo "== torch $$($$venv/bin/python -c 'import torch; print(torch.__version__)') in $$venv" && \
	PATH=$$venv/bin:$$PATH $$venv/bin/python -m pytest tests/python tests/models $(PYTEST_ARGS) \
	  -m "not slow and not exhaustive"

# The C++ tests (hostile-archive corpus included) under ASan + UBSan, and libFuzzer: one clang
# build, build/sanitize, whose objects carry both instrumentations (-fsanitize=fuzzer-no-link,
# address,undefined), so the core is compiled once for the two; asserts on, -O1 (ASan's advice)
# and line tables only (symbolized stacks; full debug info doubled the compile time), the standard
# headers precompiled (PT2ONNX_PCH: 17% less compile time). The tests run as
# JOBS shards of the gtest binary, one process each (ctest's process per test, ~2,400 of them,
# spent minutes in ASan's start-up); a shard's leak check covers all its tests.
SAN_BUILD := build/sanitize
sanitize-configure: deps deps-clang
	CXX=clang++-14 cmake -S . -B $(SAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug \
	  "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -gline-tables-only" "-DPT2ONNX_TEST_SOURCE_FLAGS=-O0" \
	  -DPT2ONNX_TESTS=ON -DPT2ONNX_FUZZ=ON -DPT2ONNX_WERROR=ON -DPT2ONNX_PCH=ON >/dev/null
test-sanitize: sanitize-configure
	cmake --build $(SAN_BUILD) -j $(JOBS) --target pt2onnx_tests
	@rc=0; pids=""; for i in $$(seq 0 $$(($(JOBS) - 1))); do \
	  ASAN_OPTIONS=detect_leaks=1 GTEST_TOTAL_SHARDS=$(JOBS) GTEST_SHARD_INDEX=$$i \
	    $(SAN_BUILD)/pt2onnx_tests --gtest_brief=1 > $(SAN_BUILD)/shard-$$i.log 2>&1 & pids="$$pids $$!"; \
	done; i=0; for p in $$pids; do \
	  r=0; wait $$p || r=$$?; tail -n 3 $(SAN_BUILD)/shard-$$i.log | sed "s/^/shard $$i: /"; \
	  if [ $$r -ne 0 ]; then cat $(SAN_BUILD)/shard-$$i.log; rc=$$r; fi; i=$$((i + 1)); \
	done; exit $$rc

# libFuzzer, seeded with the hostile corpus (valid.pt2 included, so inputs
# reach conversion), the inputs fuzzing once failed on (tests/data/fuzz/) and
# programs of the zoo's real models (tests/data/fuzz_seeds/, made by
# tests/python/make_fuzz_seeds.py: symbolic sizes, about a hundred nodes each);
# bounded. The three targets run at once: fuzz_archive
# (archive + schema readers), fuzz_pipeline (read, convert, write a file) and
# fuzz_model_reader (the ONNX reader, seeded with tests/data/onnx/*.onnx).
# FUZZ_SECONDS is the CPU time they share, a third each: with JOBS cores each
# runs FUZZ_SECONDS/JOBS of wall time (at least a third of FUZZ_SECONDS), the
# same fuzzing as one after the other in less wall time. -max_len 256 KiB: the
# deep-pickle reproducer (207 KB) and each zoo seed (at most 200 KB, which
# make_fuzz_seeds.py checks) fit whole.
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := fuzz_archive fuzz_pipeline fuzz_model_reader
fuzz: sanitize-configure fuzz-cache
	cmake --build $(SAN_BUILD) -j $(JOBS) --target $(FUZZ_TARGETS)
	@n=$(words $(FUZZ_TARGETS)); each=$$(( $(FUZZ_SECONDS) / $(JOBS) )); \
	[ $$each -lt $$(( $(FUZZ_SECONDS) / n )) ] && each=$$(( $(FUZZ_SECONDS) / n )); \
	[ $$each -gt 0 ] || each=1; pids=""; \
	for t in $(FUZZ_TARGETS); do \
	  seeds="tests/data/hostile/*.pt2 tests/data/fuzz/*.pt2 tests/data/fuzz_seeds/*.pt2 tests/data/torchscript/*.pt"; \
	  [ $$t = fuzz_model_reader ] && seeds=tests/data/onnx/*.onnx; \
	  mkdir -p $(SAN_BUILD)/corpus_$$t && cp $$seeds $(SAN_BUILD)/corpus_$$t/; \
	  echo "== $$t, $$each s (of wall time, $$n targets at once on $(JOBS) cores)"; \
	  $(SAN_BUILD)/$$t $(SAN_BUILD)/corpus_$$t -max_total_time=$$each \
	    -max_len=262144 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix=$(SAN_BUILD)/$$t- \
	    > $(SAN_BUILD)/$$t.log 2>&1 & pids="$$pids $$!"; \
	done; rc=0; set -- $(FUZZ_TARGETS); for p in $$pids; do \
	  r=0; wait $$p || r=$$?; echo "== $$1"; \
	  grep -E "^(Done|stat::|==.*ERROR|SUMMARY)" $(SAN_BUILD)/$$1.log; \
	  if [ $$r -ne 0 ]; then tail -n 60 $(SAN_BUILD)/$$1.log; rc=$$r; fi; shift; \
	done; exit $$rc

# The program cache's entry reader fuzzed with hypothesis (issue 56): damaged and re-signed
# entries, FUZZ_CACHE_EXAMPLES each (the ordinary suite runs 10); 500 each: about 20 s on 2 cores.
FUZZ_CACHE_EXAMPLES ?= 500
fuzz-cache: python
	PT2ONNX_CACHE_FUZZ_EXAMPLES=$(FUZZ_CACHE_EXAMPLES) $(PY) -m pytest -p no:cacheprovider \
	  tests/models/test_program_cache_fuzz.py $(PYTEST_ARGS) --hypothesis-show-statistics

FORMAT_FILES = $(shell git ls-files '*.cpp' '*.h')
format: apt-deps
	clang-format -i $(FORMAT_FILES)
format-check: apt-deps
	clang-format --dry-run --Werror $(FORMAT_FILES)

# The documentation site (mkdocs.yml, sources in docs/): built into site/ in strict mode (a
# broken link, anchor or API reference fails); its generated pages (bench/ results, the commands'
# --help, the C++ header) are made during the build by tools/docs_pages.py, so it needs the built
# commands; it runs no example (tests/python/test_docs.py does). docs-serve: at 127.0.0.1:8000.
DOCS_STAMP := $(VENV)/.docs-stamp
DOCS_ENV := NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true
$(DOCS_STAMP): docs/requirements.txt $(STAMP)
	tools/uv_install.sh $(PY) -r docs/requirements.txt
	@touch $@
# The compiled module's stub (nanobind's stubgen, from the built module: its signatures and
# docstrings) is where the API reference reads ConversionError and supported_targets from; it
# is made from the build each time, never committed.
CORE_STUB := python/pt2onnx/_core.pyi
docs-stub: python
	$(PY) -m nanobind.stubgen -q -m pt2onnx._core -o $(CORE_STUB)
docs: docs-stub $(DOCS_STAMP)
	$(DOCS_ENV) $(PY) -m mkdocs build --strict --clean
docs-serve: docs-stub $(DOCS_STAMP)
	$(DOCS_ENV) $(PY) -m mkdocs serve --strict -a 127.0.0.1:8000
# The built site in headless Chromium (Debian's chromium-headless-shell): the front page, a guide
# and an API page load with their navigation; screenshots in build/docs-browser/.
DOCS_BROWSER_APT := chromium-headless-shell fonts-dejavu-core
docs-browser-check: docs
	$(call apt_install,$(DOCS_BROWSER_APT))
	$(PY) tools/docs_browser_check.py --site site --out build/docs-browser
# The Debian packages only the later targets need (the sanitizer and fuzz build's clang, the docs
# check's Chromium), in one apt call: .ci/run installs them in the background from the start.
apt-deps-later: apt-deps
	$(call apt_install,$(FUZZ_APT) $(DOCS_BROWSER_APT))

# pt2onnx against torch.onnx.export (full series: long; writes bench/results.md + plots).
bench-deps: deps
	tools/uv_install.sh $(PY) -r bench/requirements.txt
bench: python bench-deps
	$(PY) bench/run.py
# A minute or two on small models, to bench/out/quick/ (CI runs it: that it works).
# BENCH_ARGS: more arguments (CI: --models llama_h256_l2, one model).
bench-quick: python bench-deps
	$(PY) bench/run.py --quick $(BENCH_ARGS)

# The model zoo (tests/models/zoo.py) through pt2onnx and torch.onnx dynamo=True, a fresh process
# per export, timed after a warm-up export (bench/zoo.md, .json) and cold (bench/zoo_cold.md,
# .json); ~35 min.
zoo: python bench-deps
	$(PY) bench/zoo.py
	$(PY) bench/zoo.py --cold

# onnxruntime session creation and peak RSS of our files beside torch.onnx's (bench/load.md).
bench-load: python bench-deps
	$(PY) bench/load.py --runs 11
# onnxruntime latency of pt2onnx's default / opset-23 / target="onnxruntime" files beside
# torch.onnx, torch.onnx + onnxruntime's optimizer and onnxruntime-genai's builder (issue 17;
# ~30 min on 2 cores; writes bench/latency.md, .json, .png). LATENCY_ARGS=--quick: a few minutes.
LATENCY_ARGS ?=
bench-latency: python bench-deps
	$(PY) bench/latency_fused.py $(LATENCY_ARGS)
# .pt2 conversion against cp (~2 min; writes bench/results_pt2.md).
bench-pt2: cpp
	PT2ONNX_CLI=$(CPP_BUILD)/pt2onnx $(PY) bench/pt2_convert.py
# The C++ core's read / convert / optimize / write per node on generated .pt2 archives of ~5k to
# ~200k nodes (one block exported by torch.export, its nodes repeated in the archive's JSON; kept
# in build/bench-node-data), peak RSS per node, linearity, perf + heaptrack profiles (~10 min;
# writes bench/node_scaling.md, .json; not in CI). NODES_ARGS=--quick: 5k and 20k, to the data folder.
NODES_ARGS ?= --profile
bench-nodes: cpp
	PT2ONNX_CLI=$(CPP_BUILD)/pt2onnx $(PY) bench/node_scaling.py $(NODES_ARGS)
# pt2onnx-pretrained on a Llama-2-7B-sized bfloat16 checkpoint (13.5 GB of random safetensors
# shards under build/bench-scale-data (or $BENCH_SCALE_DATA), deleted afterwards unless SCALE_ARGS=--keep-data) against
# `cp` of its shards, cold page cache, and the float16 file loaded in onnxruntime (needs ~30 GB
# of free disk; writes bench/scale.md, .json). SCALE_ARGS=--layers 2: a one-minute check.
SCALE_ARGS ?= --repeats 2
bench-scale: python
	$(PY) bench/scale.py $(SCALE_ARGS)
# Export time and peak RSS against model size (issue 18 item 9): LLaMA checkpoints of 44M, 0.37B,
# 1.3B, 3.4B and 6.7B parameters (bfloat16 safetensors under build/bench-scale-data/size-sweep,
# each deleted after its size; bench-scale's 7B checkpoint reused if kept) exported by
# pt2onnx-pretrained (fake weights, and --weights memory), the .pt2 path, torch.onnx and
# onnxruntime-genai's builder, whole processes, cold page cache, plus where pt2onnx-pretrained's
# start-up goes (writes bench/size_sweep.md, .json, .png; ~1 h, ~45 GB of free disk; not in CI).
# SWEEP_ARGS=--sizes 44M,0.37B --out bench/out/size_sweep: a few-minute check.
SWEEP_ARGS ?=
bench-sizes: python bench-deps
	$(PY) bench/size_sweep.py $(SWEEP_ARGS)

# docs/coverage.md: OpInfo pass rates per opset / dtype / form beside
# torch.onnx.export(dynamo=True), and every converted target (long).
coverage: python bench-deps
	$(PY) tools/coverage.py -j $(JOBS)

clean:
	rm -rf build
