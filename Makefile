# vitbench — every target that needs Python depends on the install stamp, so any target can come first.
PYTHON     ?= python3
VENV       := .venv
# The torch build this machine's registry serves. TORCH_SPEC= keeps the torch of $(PYTHON)'s environment
# (system, conda or an active venv): the venv then sees that environment's packages and installs no torch.
TORCH_SPEC ?= torch==2.14.1 torchvision==0.29.1
# optional extras: test (pytest and plugins); ray (EXECUTOR=ray) is opt-in: make install EXTRAS=test,ray
EXTRAS     ?= test
# INSTALL=0: no venv and no install step; run with an existing Python (PY=python3, default $(PYTHON)),
# after checking that it can import every module vitbench needs (the missing ones named in one line)
INSTALL    ?= 1
comma      := ,
ifeq ($(filter 0 no false,$(INSTALL)),)
PY         := $(VENV)/bin/python
# one stamp per set of extras: `make install EXTRAS=test,ray` on an existing .venv installs what it lacks
STAMP      := $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))
else
PY         ?= $(PYTHON)
STAMP      := check-env
endif

# Run settings: each passes one flag of `python -m ablations sweep` / `train`, declared once in
# ablations/options.py (tests/test_options.py checks this list against it). Empty: the program's default.
DATASET   ?=
DATA_ROOT ?=
DOWNLOAD  ?=
IMG_SIZE  ?=
EPOCHS    ?=
SEEDS     ?=
COST_ROUNDS ?=
COST_BUDGET ?=
DEVICE    ?=
DTYPE     ?=
COMPILE   ?=
GRAPHS    ?=
CUDNN_ATTENTION ?=
EVALUATION ?=
RUN_ORDER ?=
AUTO_TRAIN ?=
PACK ?=
INIT      ?=
PRETRAINED ?=
OUT       ?= results
CHECKPOINT_EVERY ?=
DRY_RUN   ?=
LARGE     ?=
INTO_REFERENCE ?=
TENSORBOARD ?=
EXECUTOR  ?=
JOBS      ?=
THREADS   ?=
MPS       ?=
WORKERS   ?=
MAX_RETRIES ?=
CPUS_PER_TASK ?=
GPUS_PER_TASK ?=
PRESET    ?=
PYTEST_ARGS ?=

opt = $(if $(strip $(2)),$(1) $(2))
# a path option, quoted for the shell: OUT="my results" stays one argument
qopt = $(if $(strip $(2)),$(1) '$(2)')
# a switch: passed for VAR=1 (or yes, true)
switch = $(if $(filter 1 yes true,$(strip $(2))),$(1))
RUN_ARGS = $(call opt,--dataset,$(DATASET)) $(call qopt,--data-root,$(DATA_ROOT)) $(call switch,--download,$(DOWNLOAD)) \
  $(call opt,--img-size,$(IMG_SIZE)) \
  $(call opt,--epochs,$(EPOCHS)) $(call opt,--seeds,$(SEEDS)) $(call opt,--auto-train,$(AUTO_TRAIN)) $(call opt,--cost-rounds,$(COST_ROUNDS)) $(call opt,--cost-budget,$(COST_BUDGET)) \
  $(call opt,--device,$(DEVICE)) $(call opt,--dtype,$(DTYPE)) $(call opt,--compile,$(COMPILE)) \
  $(call opt,--graphs,$(GRAPHS)) $(call opt,--cudnn-attention,$(CUDNN_ATTENTION)) $(call opt,--evaluation,$(EVALUATION)) $(call opt,--run-order,$(RUN_ORDER)) $(call opt,--pack,$(PACK)) $(call qopt,--init,$(INIT)) $(call opt,--pretrained,$(PRETRAINED)) \
  $(call qopt,--out,$(OUT)) $(call opt,--checkpoint-every,$(CHECKPOINT_EVERY)) $(call switch,--dry-run,$(DRY_RUN)) $(call switch,--large,$(LARGE)) \
  $(INTO_REF) $(call switch,--tensorboard,$(TENSORBOARD)) $(call opt,--executor,$(EXECUTOR)) $(call opt,--jobs,$(JOBS)) $(call opt,--threads,$(THREADS)) \
  $(call opt,--mps,$(MPS)) $(call opt,--workers,$(WORKERS)) $(call opt,--max-retries,$(MAX_RETRIES)) $(call opt,--cpus-per-task,$(CPUS_PER_TASK)) \
  $(call opt,--gpus-per-task,$(GPUS_PER_TASK))
INTO_REF = $(call switch,--into-reference,$(INTO_REFERENCE))

.PHONY: help install check-env test test-quick lint test-gpu crash-test calibrate known predict migrate cost ablations train bench bench-tokens bench-speed bench-step compare report clean

install: $(STAMP)  ## the .venv with the project and its test extras (every target installs on first use)

# the stamp of every subset of the extras installed (in the order given): an install with test,ray is one with test
$(VENV)/.installed-%: pyproject.toml
	$(PYTHON) -m venv $(if $(strip $(TORCH_SPEC)),,--system-site-packages) $(VENV)
	$(if $(strip $(TORCH_SPEC)),,$(PYTHON) -c "import sysconfig; print(sysconfig.get_paths()['purelib'])" > "$$($(VENV)/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/vitbench-base-env.pth")
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(if $(strip $(TORCH_SPEC)),$(VENV)/bin/pip install --quiet $(TORCH_SPEC))
	$(VENV)/bin/pip install --quiet -e '.[$(EXTRAS)]'
	$(VENV)/bin/python -c "import itertools as i, pathlib, sys; e = sys.argv[2].split(','); [pathlib.Path(sys.argv[1], '.installed-' + '-'.join(c)).touch() for n in range(1, len(e) + 1) for c in i.combinations(e, n)]" '$(VENV)' '$(EXTRAS)'

# INSTALL=0: the Python at hand must import everything the goals need (no network, no pip): the test extra
# only for the goals that run the suite or the linter (and a bare `make`/`make install`), other extras as named
TEST_GOALS   := install test lint test-gpu crash-test
CHECK_EXTRAS  = $(filter-out $(if $(filter $(TEST_GOALS),$(or $(MAKECMDGOALS),install)),,test),$(subst $(comma), ,$(EXTRAS)))
check-env:
	$(PY) -m ablations.cli.envcheck $(CHECK_EXTRAS)

# the linter (ruff, configured in pyproject.toml), then the suite on every core (pytest-xdist, one torch
# thread per worker; TEST_JOBS=0 runs it in one process)
TEST_JOBS ?= auto
test: $(STAMP)  ## the linter, then the test suite on every core (TEST_JOBS=0: one process)
	$(PY) -m ruff check --quiet .
	$(PY) -m pytest $(if $(filter 0,$(TEST_JOBS)),-p no:xdist,-n $(TEST_JOBS)) $(PYTEST_ARGS)

test-quick: $(STAMP)  ## the tests that take under a few seconds each (not the slow ones: kills, subprocess sweeps, calibrations)
	$(PY) -m pytest $(if $(filter 0,$(TEST_JOBS)),-p no:xdist,-n $(TEST_JOBS)) -m "not slow" $(PYTEST_ARGS)

lint: $(STAMP)  ## the linter alone (ruff)
	$(PY) -m ruff check .

# the CUDA-only tests (graphed step = eager step, bf16/fp16, NVML, CUDA memory, compile); skipped without CUDA
test-gpu: $(STAMP)  ## the CUDA-only tests (skipped without CUDA)
	$(PY) -m pytest -m gpu -v $(PYTEST_ARGS)

# SIGKILLs at KILLS random instants (half inside a save step), a torn line, garbage lines and a full
# tmpfs (root only) against a small digits sweep; then the same sweep with JOBS=2 under worker SIGKILLs,
# driver SIGKILLs and SIGTERMs (JOBS_KILLS of them); every run must equal an uninterrupted run's
KILLS ?= 24
JOBS_KILLS ?= $(KILLS)
crash-test: $(STAMP)  ## SIGKILLs, torn tables and a full disk against a small sweep; every run must survive
	$(PY) tests/crash.py --kills $(KILLS) --jobs-kills $(JOBS_KILLS) $(call opt,--pack,$(PACK))

# the sweeps marked `default = true` in ablations/sweeps/*.toml (patch, heads, depth), then the report
ablations: $(STAMP)  ## the default sweeps (patch, heads, depth), then the report
	$(if $(filter 1 yes true,$(DRY_RUN)),,VITBENCH_REPORT_FOLLOWS=1) $(PY) -m ablations sweep default $(RUN_ARGS) $(ARGS)
	$(if $(filter 1 yes true,$(DRY_RUN)),,$(REPORT))

# one target per ablations/sweeps/<name>.toml: a new sweep is a new TOML file and nothing else
SWEEP_NAMES := $(basename $(notdir $(wildcard ablations/sweeps/*.toml)))
.PHONY: $(addprefix ablate-,$(SWEEP_NAMES))
$(addprefix ablate-,$(SWEEP_NAMES)): ablate-%: $(STAMP)  ## one sweep per ablations/sweeps/<name>.toml
	$(PY) -m ablations sweep $* $(RUN_ARGS) $(ARGS)
# any other name: one line naming the sweeps there are (make's own "No rule to make target" names none)
ablate-%:
	$(error make ablate-$*: no sweep named '$*' (no ablations/sweeps/$*.toml); the sweeps: $(SWEEP_NAMES))

train: $(STAMP)  ## one config (PRESET), once per seed
	$(PY) -m ablations train $(call opt,--preset,$(PRESET)) $(RUN_ARGS) $(ARGS)

bench: $(STAMP)  ## pytest-benchmark of the attention backends (JSON and CSV under OUT/bench)
	$(PY) -m bench convert-json --check '$(OUT)/bench/pytest-benchmark.json' '$(OUT)/bench/pytest-benchmark.csv' $(INTO_REF)
	mkdir -p '$(OUT)/bench'
	$(PY) -m pytest benchmarks/test_bench_backends.py -p no:cacheprovider --benchmark-enable \
	  '--benchmark-json=$(OUT)/bench/pytest-benchmark.json' $(PYTEST_ARGS)
	$(PY) -m bench convert-json '$(OUT)/bench/pytest-benchmark.json' '$(OUT)/bench/pytest-benchmark.csv' $(INTO_REF)

# throughput and memory of the four backends against sequence length: $(OUT)/bench/backends.csv
bench-tokens: $(STAMP)  ## the four backends' throughput and memory at 65, 197 and 785 tokens
	$(PY) -m bench run --tokens 65,197,785 --batch-size 8 --name backends --out '$(OUT)' $(INTO_REF) $(ARGS)

bench-speed: $(STAMP)  ## the four backends against timm's ViT-S/16, side by side
	$(PY) -m bench.vs_timm --out '$(OUT)' $(INTO_REF) $(ARGS)

# the training step alone, eager against static buffers (a CUDA graph on CUDA), interleaved rounds
bench-step: $(STAMP)  ## the training step alone, eager against static buffers (a CUDA graph on CUDA)
	$(PY) -m ablations stepbench $(call opt,--preset,$(PRESET)) $(call opt,--dataset,$(DATASET)) $(call opt,--device,$(DEVICE)) $(call qopt,--data-root,$(DATA_ROOT)) $(ARGS)

# the report's test against known answers: A/A trials (false-positive rate against α, p-value distribution)
# and planted 0.5- and 1-point differences (power), from the saved predictions of the runs under FROM (no
# training; default the committed reference); TRAIN=1 trains a small ViT on digits instead (minutes)
FROM ?= results/reference
TRAIN ?=
CALIBRATE_ARGS ?=
calibrate: $(STAMP)  ## the report's test against known answers on saved runs: error rates and power
	$(PY) -m ablations calibrate $(if $(filter 1 yes true,$(TRAIN)),--train,--from '$(FROM)') --out '$(OUT)' $(INTO_REF) $(CALIBRATE_ARGS)

# the harness on synthetic tasks whose answers are known (positions needed, identical backends, shuffled
# labels, a planted difference): runs through `sweep`, checks the report's analysis; exits 1 on a miss
known: $(STAMP)  ## four synthetic tasks whose answers are known, through the sweep command
	$(PY) -m ablations known --out '$(OUT)/known' $(call opt,--seeds,$(SEEDS)) $(call opt,--jobs,$(JOBS)) $(ARGS)

# a trained run on your images: make predict IMAGES="digit.png x.jpg" RUN=3f2a9c (files or folders; top-5 and attention figure)
IMAGES ?=
RUN    ?=
predict: $(STAMP)  ## a trained run on your images (IMAGES, RUN): top-5 and where it looks
	$(if $(strip $(IMAGES)),,$(error make predict needs your images and a run: make predict IMAGES="digit.png x.jpg" RUN=<run_id>))
	$(PY) -m ablations predict $(IMAGES) $(call opt,--run,$(RUN)) --out '$(OUT)' $(call qopt,--data-root,$(DATA_ROOT)) $(ARGS)

# two OUT folders of the same sweeps (e.g. GRAPHS=1 and GRAPHS=0) point by point: make compare A=out1 B=out2
compare: $(STAMP)  ## two OUT folders of the same sweeps, point by point (A, B)
	$(if $(and $(strip $(A)),$(strip $(B))),,$(error make compare needs two OUT folders: make compare A=results-graphs B=results-eager))
	$(PY) -m ablations compare '$(A)' '$(B)' $(ARGS)

# the speed of every point trained under OUT, measured in one interleaved cost phase (COST_ROUNDS, COST_BUDGET)
cost: $(STAMP)  ## the speed of every point trained under OUT, measured side by side
	$(PY) -m ablations cost --out '$(OUT)' $(call opt,--device,$(DEVICE)) $(call opt,--cost-rounds,$(COST_ROUNDS)) \
	  $(call opt,--cost-budget,$(COST_BUDGET)) $(call opt,--graphs,$(GRAPHS)) $(call opt,--cudnn-attention,$(CUDNN_ATTENTION)) $(INTO_REF)

# an OUT's older sweep tables rewritten in the current format, in place (no retraining, run ids kept)
migrate: $(STAMP)  ## an OUT's older tables rewritten in the current format, in place
	$(PY) -m ablations migrate --out '$(OUT)' $(INTO_REF)

# MARGIN: the report's equivalence margin for sweeps whose spec sets none: accuracy points (default 0.5) or N% of
# the best setting's error (MARGIN=20%)
MARGIN ?=
REPORT = $(PY) -m ablations report --out '$(OUT)' $(call qopt,--data-root,$(DATA_ROOT)) $(call opt,--margin,$(MARGIN)) $(INTO_REF)
report: $(STAMP)  ## figures, REPORT.md and verdicts.csv under OUT from its tables; never trains
	$(REPORT)

help:  ## this list: every target and what it does
	@awk -F':.*## ' '/^[^#\t ][^=]*:.*## / {name = ($$1 ~ /addprefix/) ? "ablate-<name>" : $$1; \
	  printf "  make %-16s %s\n", name, $$2}' $(firstword $(MAKEFILE_LIST))

clean:  ## remove .venv and caches
	rm -rf $(VENV) *.egg-info .pytest_cache .benchmarks
