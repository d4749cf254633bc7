# Each target creates .venv from requirements-dev.txt when it is missing or out of date.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The CDK CLI, major version pinned: npm's "latest" tag is an old 3.0.0 that cannot read aws-cdk-lib 2's output.
CDK := npx --yes aws-cdk@2

export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION := 1

.PHONY: venv run lint test test-fast synth deploy dist bench cron-next docs clean

venv: $(STAMP)

$(STAMP): requirements.txt requirements-dev.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements-dev.txt
	touch $(STAMP)

## make run ARGS="--duration 60": the local environment on embedded moto (ARGS=--ui: with the web dashboard beside it)
run: $(STAMP)
	$(PY) -m worker_tier_local $(ARGS)

## make lint: ruff over the repo, mypy over src/, tasks/ and app.py (pyproject.toml configures both)
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

## make test: lint, then every test: unit, functional, infra, e2e, cli, package and the slow ones (about 10 min; CI)
test: lint
	$(PY) -m pytest -n 2 --durations=10 $(PYTEST_ARGS)

## make test-fast: the inner loop: unit and functional tests without the `slow` marker, no lint. About 2,070 tests:
## 7 min serially on a shared 2-core machine (4 min of CPU), so less with -n 2; make test runs them all for CI
test-fast: $(STAMP)
	$(PY) -m pytest -n 2 -m "not slow" --durations=10 tests/unit tests/functional $(PYTEST_ARGS)

## make synth: CloudFormation template in cdk.out/, offline, no Docker, no AWS calls
synth: $(STAMP)
	CDK_OUTDIR=cdk.out $(PY) app.py

## make deploy ARGS="--require-approval never": the CDK CLI deploys app.py, run on .venv by cdk.json's bin/cdk-app
deploy: $(STAMP)
	$(CDK) deploy $(ARGS)

## make dist: wheel and sdist in dist/; `python -m build` builds the sdist, then the wheel from it (so the sdist
## is complete), in an isolated env whose setuptools comes from the package registry like any pip install
dist: $(STAMP)
	rm -rf dist
	$(PY) -m build --outdir dist .

## make cron-next: each cron.yaml entry's next 5 run times, UTC and local
cron-next: $(STAMP)
	$(PY) -m worker_tier.periodic.cron_preview $(ARGS)

## make bench: benchmarks; JSON in bench/results/
bench: $(STAMP)
	$(PY) -m bench $(ARGS)

## make docs: regenerate docs/settings.md from worker_tier.core.settings.Settings
docs: $(STAMP)
	$(PY) -m worker_tier_cdk.settings_doc

clean:
	rm -rf cdk.out .pytest_cache .mypy_cache .ruff_cache dist build src/*.egg-info
