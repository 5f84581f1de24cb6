# The README's commands. Each bootstraps .venv itself (idempotent: reinstalls only when pyproject.toml changes).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install train test lint bench docs clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@# torch==2.13.0 first: on these machines it resolves to the local CPU wheel, not the CUDA build.
	$(BIN)/pip install -q --disable-pip-version-check torch==2.13.0
	$(BIN)/pip install -q --disable-pip-version-check -e '.[dev,ros]'
	@touch $(STAMP)

install: $(STAMP)

train: $(STAMP)
	$(BIN)/robolearn train env=cartpole-swingup

test: $(STAMP)
	$(BIN)/python -m pytest tests -n 2 --dist worksteal --durations=30

lint: $(STAMP)
	$(BIN)/ruff check .

bench: $(STAMP)
	$(BIN)/python benchmarks/speed/sim_throughput.py

docs: $(STAMP)
	$(BIN)/mkdocs build --strict -d site

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache site
