# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
# Both create .venv and install what they need. Without a GPU, torch is the CPU build
# (set TORCH_SPEC / TORCH_INDEX to choose another build).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
HAS_GPU := $(shell command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && echo 1)
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?=

.PHONY: venv test demo bench clean manifests

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
ifeq ($(HAS_GPU),1)
	$(PY) -m pip install -q "$(TORCH_SPEC)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
else
	@echo "No GPU found: installing the CPU build of torch ($(TORCH_SPEC))"
	$(PY) -m pip install -q "$(TORCH_SPEC)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
endif
	$(PY) -m pip install -q -e ".[test]"
	touch $@

venv: $(VENV)/.installed

test: venv
	$(PY) -m pytest -q tests

demo: venv
	$(VENV)/bin/llm-finetuning demo

bench: venv
	for b in bench/bench_*.py; do $(PY) $$b || exit 1; done

manifests: venv
	$(PY) -m mcp_server.manifests

clean:
	rm -rf $(VENV) .pytest_cache
