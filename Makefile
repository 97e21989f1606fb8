# Two commands do all set-up on a fresh machine (see README):
#   make train  install, then a few real steps of agentic PPO with the embedded defaults
#   make test   install, then run the test suite (GPU tests skip cleanly without CUDA)
# make demo judges a bundled kernel with the sandbox (GPU if present, else CPU).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: install train demo test test-all test-gpu

install: $(VENV)/.installed

# --system-site-packages lets a GPU user's existing torch serve; install_torch.sh adds one
# (the CPU build on CPU-only machines) only when none is importable.
$(VENV)/.installed: pyproject.toml scripts/install_torch.sh
	$(PYTHON) -m venv --system-site-packages $(VENV)
	bash scripts/install_torch.sh $(PY)
	$(PY) -m pip install -q -e '.[test]'
	touch $@

train: install
	$(PY) train.py stage=agentic_rl reward=graduated

demo: install
	$(PY) -m sandbox demo

# CI's suite: everything but the tests marked slow (benchmark scripts run end to end); the 25
# slowest tests listed at the end, to see where the 45-minute budget goes.
test: install
	$(PY) -m pytest -q -m "not slow" --durations=25

test-all: install
	$(PY) -m pytest -q

test-gpu: install
	$(PY) -m pytest -q -m gpu
