# Two commands a newcomer types: `make reproduce` and `make test`. Both create .venv when it is missing and
# install the CPU stack once; the stamp file makes a second run install nothing.
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.ifcore-installed
NOTEBOOKS := $(wildcard notebooks/*.ipynb)

.PHONY: install test reproduce bench clean-cache

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -e '.[cpu,dev]'
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q

# Executes every notebook headless into papermill_runs/; the notebooks write their figures to figures/.
reproduce: $(STAMP)
	mkdir -p papermill_runs figures
	for nb in $(NOTEBOOKS); do \
	  $(VENV)/bin/papermill --cwd notebooks -k python3 $$nb papermill_runs/$$(basename $$nb) || exit 1; \
	done

bench: $(STAMP)
	$(VENV)/bin/ifcore bench verify
	$(VENV)/bin/ifcore bench rewards
	$(VENV)/bin/ifcore bench ifeval

clean-cache:
	rm -rf $${IFCORE_CACHE:-$$HOME/.cache/ifcore}
