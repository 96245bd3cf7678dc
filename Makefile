# The two commands of the README: `make demo` runs the main job on the embedded stack,
# `make test` runs the checks and the whole test suite. Both install what they need first.
.PHONY: install demo dev test lint bench

install:
	bash scripts/bootstrap.sh

demo: install
	.venv/bin/reelsense demo

dev: install
	.venv/bin/reelsense dev

# The docs are built strictly (a broken link fails); NO_MKDOCS_2_WARNING only silences the
# theme's banner about MkDocs 2.
lint: install
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/mypy
	NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict
	.venv/bin/lint-imports

# Two workers: most tests wait on services more than they compute. Each module is one unit of
# work and the modules that start several service processes one more (tests/conftest.py), so
# two of those soaks never share the 2 cores.
test: lint
	.venv/bin/python -m pytest -q -n 2

bench: install
	.venv/bin/python -m bench.perf.pipeline --quick --json bench/out/pipeline.json
