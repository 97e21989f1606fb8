# Two commands do all set-up on a fresh machine (see README):
#   make demo   install, then judge a bundled kernel with the sandbox (GPU if present, else CPU)
#   make test   install, then run the test suite (GPU tests skip cleanly without CUDA)
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: install demo test test-gpu

install: $(VENV)/.installed

# --system-site-packages lets a GPU user's existing torch serve; install_torch.sh adds one
# (the CPU build on CPU-only machines) only when none is importable.
$(VENV)/.installed: pyproject.toml scripts/install_torch.sh
	$(PYTHON) -m venv --system-site-packages $(VENV)
	bash scripts/install_torch.sh $(PY)
	$(PY) -m pip install -q -e '.[test]'
	touch $@

demo: install
	$(PY) -m sandbox demo

test: install
	$(PY) -m pytest -q

test-gpu: install
	$(PY) -m pytest -q -m gpu
