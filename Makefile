# Two commands do all setup: `make demo` runs geotrain on the embedded default (bundled prices,
# local provider, SQLite ledger): catalog, SkyPilot's hello task, estimate, plan, a plan for the local provider launched
# with injected preemptions and a capacity failure, its cost report, and a spot-market replay (files in .demo/).
# `make test` runs the fast suite a contributor runs before each commit (unit, CLI and contract tests and
# one end-to-end launch, on every core: pytest-xdist); `make test-all` runs every test, one at a time,
# lists the 20 slowest, and checks that it ran the whole suite (scripts/check_suite.py). Both create or
# reuse .venv and install what they need; a second run skips the install unless pyproject.toml changed.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# CPU-only machines elsewhere: make demo (or test) TORCH="torch==2.14.1 torchvision==0.29.1 --index-url https://download.pytorch.org/whl/cpu"
TORCH  ?= torch==2.14.1 torchvision==0.29.1
PIP    := $(BIN)/python -m pip install --quiet --disable-pip-version-check
# make test's pytest-xdist workers (auto: one per core); make test-all's JUnit report, which
# scripts/check_suite.py reads
WORKERS ?= auto
REPORT  ?= .test-all.xml

.PHONY: demo test test-all bench data clean

demo: $(VENV)/.demo-installed
	$(BIN)/geotrain catalog show bundled
	$(BIN)/geotrain catalog list --accelerator T4 --market spot --limit 12
	$(BIN)/geotrain catalog list --continent europe --accelerator A100 --limit 8
	$(BIN)/geotrain launch examples/tasks/hello.yaml --yes
	$(BIN)/geotrain estimate --workload convnext-large \
	    --nodes gcp/us-central1-a/n1-standard-8+T4=4,aws/us-west-2/g4dn.2xlarge=4,gcp/europe-west3/n1-standard-8+T4=2
	@mkdir -p .demo
	$(BIN)/geotrain plan examples/job.yaml -o .demo/plan.json --plot .demo/frontier.png
	$(BIN)/geotrain plan --workload tiny-cnn --strategy allreduce --provider local --target-sps 100 -o .demo/mix.json \
	    --nodes aws/usw2-az1/g4dn.xlarge,aws/usw2-az2/g4dn.xlarge,aws/use1-az1/g4dn.xlarge,aws/use1-az2/g4dn.xlarge
	$(BIN)/geotrain launch .demo/mix.json --steps 300 --preempt-trace examples/preemptions.yaml --block-min 5
	$(BIN)/geotrain cost-report --plot .demo/costs.png
	$(BIN)/geotrain simulate --trace examples/traces/spot_two_zones.csv --job examples/sim/tiny-job.yaml \
	    --plot .demo/replay.png

test: $(VENV)/.test-installed
	sh scripts/ensure_sshd.sh  # the on-prem provider's tests talk to a real sshd
	sh scripts/ensure_hosts.sh  # nft & co. for the faithful remote hosts (tests/fakes/hosts.py)
	$(BIN)/python -m pytest -m "not slow" -n $(WORKERS) $(PYTEST_ARGS)

test-all: $(VENV)/.test-installed
	sh scripts/ensure_sshd.sh
	sh scripts/ensure_hosts.sh
	GEOTRAIN_TEST_ALL=1 $(BIN)/python -m pytest --durations=20 --junitxml=$(REPORT) $(PYTEST_ARGS)
	$(BIN)/python scripts/check_suite.py $(REPORT)

bench: $(VENV)/.test-installed
	$(BIN)/python bench/startup.py
	$(BIN)/python bench/perf_model.py
	$(BIN)/python bench/plan.py
	$(BIN)/python bench/planner.py
	$(BIN)/python bench/launch.py
	$(BIN)/python bench/plan_vs_actual.py
	$(BIN)/python bench/chaos.py
	$(BIN)/python bench/recovery.py
	$(BIN)/python bench/bad_inputs.py
	$(BIN)/python bench/capacity.py
	$(BIN)/python bench/simulate.py

# Rebuild the bundled data from ../shared/data (see the PROVENANCE.md files) and refit the model.
data: $(VENV)/.demo-installed
	$(BIN)/python scripts/build_bundled_data.py
	$(BIN)/python scripts/build_network_data.py
	$(BIN)/python scripts/calibrate_perf.py
	$(BIN)/python scripts/derive_gpu_ratios.py
	$(BIN)/python scripts/derive_gpu_memory.py
	$(BIN)/python scripts/build_capacity.py

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.demo-installed: pyproject.toml | $(BIN)/python
	$(PIP) $(TORCH)
	$(PIP) -e '.[train,models,plot]'
	@touch $@

$(VENV)/.test-installed: pyproject.toml | $(BIN)/python
	$(PIP) $(TORCH)
	$(PIP) -e '.[aws,gcp,azure,train,models,plot,dev]'
	@touch $@ $(VENV)/.demo-installed

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .hypothesis .demo .test-all.xml
