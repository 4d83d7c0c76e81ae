# statekit developer tasks. `make demo` and `make test` create .venv on first use.

PYTHON ?= python3
VENV ?= .venv
VENV_PY := $(VENV)/bin/python
PLUGIN_EXAMPLES := examples/statekit-sqlite examples/statekit-sqlite-storage
PYTEST_ARGS ?=
BENCH_ARGS ?=

.DEFAULT_GOAL := help
.PHONY: help venv demo demo-local demo-windows demo-orders test docs bench bench-quick clean distclean

help:
	@echo "make demo       run the main example on local Spark: examples/spark_demo.py (creates $(VENV) on first run)"
	@echo "make demo-local the same pipeline on statekit's local runner, without Spark: examples/local_demo.py"
	@echo "make demo-windows event-time windows and timers on local Spark: examples/windows_demo.py"
	@echo "make demo-orders two inputs on local Spark, orders and payments with unpaid-order alerts: examples/orders_demo.py"
	@echo "make test       run the test suite; extra pytest arguments via PYTEST_ARGS='...'"
	@echo "make docs       build the documentation site strictly into site/ (MkDocs)"
	@echo "make bench      run every benchmark at full size (long): bench-results.json, a table, and a chart"
	@echo "                bench-results.png if matplotlib is installed; extra arguments via BENCH_ARGS='...'"
	@echo "make bench-quick the same at the quick sizes (several minutes); see benchmarks/README.md"
	@echo "make clean      remove build artifacts and caches (keeps $(VENV))"
	@echo "make distclean  clean, and remove $(VENV) too"

$(VENV_PY):
	$(PYTHON) -m venv $(VENV)

PIP := $(VENV_PY) -m pip install -q --disable-pip-version-check

# Each target installs only what it uses, and again only when a pyproject.toml changes (or the
# virtual environment is new): the demos statekit alone, `make test` the test extras and the example
# plugins (a backend and a storage: their tests run with the suite).
$(VENV)/.installed-demo: pyproject.toml | $(VENV_PY)
	$(PIP) --upgrade pip
	$(PIP) -e .
	@touch $@

$(VENV)/.installed-test: pyproject.toml $(addsuffix /pyproject.toml,$(PLUGIN_EXAMPLES)) | $(VENV_PY)
	$(PIP) --upgrade pip
	$(PIP) -e '.[test]' $(addprefix -e ,$(PLUGIN_EXAMPLES))
	@touch $@

$(VENV)/.installed-bench: pyproject.toml | $(VENV_PY)
	$(PIP) --upgrade pip
	$(PIP) -e '.[bench]'
	@touch $@

$(VENV)/.installed-docs: pyproject.toml | $(VENV_PY)
	$(PIP) --upgrade pip
	$(PIP) -e '.[docs]'
	@touch $@

venv: $(VENV)/.installed-test

demo: $(VENV)/.installed-demo
	$(VENV_PY) examples/spark_demo.py

demo-local: $(VENV)/.installed-demo
	$(VENV_PY) examples/local_demo.py

demo-windows: $(VENV)/.installed-demo
	$(VENV_PY) examples/windows_demo.py

demo-orders: $(VENV)/.installed-demo
	$(VENV_PY) examples/orders_demo.py

test: $(VENV)/.installed-test
	$(VENV_PY) -m pytest $(PYTEST_ARGS)

docs: $(VENV)/.installed-docs
	$(VENV_PY) -m mkdocs build --strict --site-dir site

bench: $(VENV)/.installed-bench
	$(VENV_PY) -m benchmarks --json bench-results.json --png bench-results.png $(BENCH_ARGS)

bench-quick: $(VENV)/.installed-bench
	$(VENV_PY) -m benchmarks --quick --json bench-results.json --png bench-results.png $(BENCH_ARGS)

clean:
	rm -rf build dist site .pytest_cache .hypothesis spark-warehouse metastore_db derby.log bench-results.json bench-results.png
	find . -path ./$(VENV) -prune -o -name '*.egg-info' -type d -prune -exec rm -rf {} +
	find . -path ./$(VENV) -prune -o -name '__pycache__' -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)
