# One entry point for a fresh machine. `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PY_OP      ?= python3.11
# python3.9 on PATH, else pyenv's newest 3.9 (deploy/doctor.sh --help); empty when there is none
PY_TRAINER ?= $(shell bash deploy/doctor.sh --find-python3.9)
VENV_OP    := .venv/op
VENV_TR    := .venv/trainer
OP         := $(VENV_OP)/bin
TR         := $(VENV_TR)/bin
export DTR_CACHE ?= $(HOME)/.cache/dtr
export DTR_TRAINER_PYTHON ?= $(CURDIR)/$(TR)/python
# The installer's (uv's) own output while the environments are built: none by default; ./dtr empties it on a first
# build, so that its progress shows instead of silence.
PIP_QUIET  ?= -q
# What each target needs, one line per tool (deploy/doctor.sh): the home of every "missing X" message.
DOCTOR = PY_OP='$(PY_OP)' PY_TRAINER='$(PY_TRAINER)' bash deploy/doctor.sh

.PHONY: help doctor setup setup-check setup-op setup-trainer install-cli lint test test-fast test-unit test-trainer test-integration test-e2e cluster-build run clean

help: ## list targets
	@grep -E '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

doctor: ## check the tools every target needs: ok/missing, which targets, how to get each; fails if make run cannot run
	@$(DOCTOR)

setup: setup-check setup-op setup-trainer ## create both Python environments (pinned)

# uv installs every environment: from its cache (UV_CACHE_DIR, ~/.cache/uv) a fresh clone's take seconds, not pip's
# minutes; the files are linked from there, their bytecode compiled in place. Its pin: deploy/requirements-uv.txt
# (the images' locks use the same). Keyed by its version, never rebuilt for a newer checkout of the same pin.
UV_VERSION := $(shell sed -n 's/^uv==//p' deploy/requirements-uv.txt)
UV_HOME    := $(DTR_CACHE)/uv-$(UV_VERSION)
UV         := $(UV_HOME)/bin/uv
UV_INSTALL  = $(UV) pip install $(PIP_QUIET) --compile-bytecode --python

$(UV):
	@$(DOCTOR) -q setup-op
	$(PY_OP) -m venv $(UV_HOME)
	$(UV_HOME)/bin/pip install -q -r deploy/requirements-uv.txt

# The Pythons, before anything is built (the venv rules check theirs again, for -j and direct use).
setup-check:
	@$(DOCTOR) -q setup

$(OP)/dtr: operator/requirements.txt operator/requirements-build.txt operator/pyproject.toml contract/pyproject.toml | $(UV)
	@$(DOCTOR) -q setup-op
	$(PY_OP) -m venv --without-pip $(VENV_OP)
	$(UV_INSTALL) $(OP)/python -r operator/requirements-build.txt -r operator/requirements.txt
	$(UV_INSTALL) $(OP)/python --no-deps --no-build-isolation -e contract/ -e operator/
	touch $@

setup-op: $(OP)/dtr

$(TR)/.installed: trainer/requirements.txt trainer/requirements-build.txt trainer/requirements-test.txt trainer/pyproject.toml contract/pyproject.toml | $(UV)
	@$(DOCTOR) -q setup-trainer
	$(PY_TRAINER) -m venv --without-pip $(VENV_TR)
	$(UV_INSTALL) $(TR)/python -r trainer/requirements-build.txt -r trainer/requirements.txt -r trainer/requirements-test.txt
	$(UV_INSTALL) $(TR)/python --no-deps --no-build-isolation -e contract/ -e trainer/
	TF_CPP_MIN_LOG_LEVEL=2 $(TR)/python -c "import tensorflow as tf, numpy; assert tf.__version__ == '2.11.0', tf.__version__; print('TensorFlow', tf.__version__, 'numpy', numpy.__version__)"
	touch $@

setup-trainer: $(TR)/.installed

# ./dtr on your PATH: a symlink in $(PREFIX)/bin (the shim builds the environments it needs on first use).
PREFIX ?= $(HOME)/.local
install-cli: ## link $(PREFIX)/bin/dtr (PREFIX=~/.local) to ./dtr, so that `dtr` works from any directory
	@mkdir -p '$(PREFIX)/bin'
	@ln -sfn '$(CURDIR)/dtr' '$(PREFIX)/bin/dtr'
	@echo '$(PREFIX)/bin/dtr -> $(CURDIR)/dtr'
	@case ":$$PATH:" in *':$(PREFIX)/bin:'*) ;; *) echo 'note: $(PREFIX)/bin is not on PATH; add it (export PATH="$(PREFIX)/bin:$$PATH")';; esac

# Cyclomatic complexity as radon counts it (ruff's C901 does not count boolean operators, so it passes more):
# xenon fails on any function of the product ranked C, i.e. above 10.
COMPLEXITY_PATHS := operator trainer contract docs/gen.py deploy/images/lock.py deploy/images/slim_trainer.py
# The function gate cannot be met by growing a file: a product module over this many lines is split by concern.
MAX_MODULE_LINES := 500

lint: setup-op lint-deploy ## ruff on all Python; complexity <= 10 (radon) and modules <= 500 lines in the product; the import layers; the images' locks; shellcheck and hadolint on the deploy files
	$(OP)/ruff check operator trainer contract tests bench devcluster docs deploy
	$(OP)/xenon --max-absolute B $(COMPLEXITY_PATHS)
	@big=$$(find operator trainer contract -name '*.py' -not -path '*/.venv*' -not -path '*/build/*' -exec wc -l {} + \
	  | awk '$$2 != "total" && $$1 > $(MAX_MODULE_LINES) {print "  " $$2 " (" $$1 " lines)"}'); \
	  if [ -n "$$big" ]; then echo "product modules over $(MAX_MODULE_LINES) lines (split each by concern):"; echo "$$big"; exit 1; fi
	$(OP)/lint-imports
	$(OP)/python deploy/images/lock.py --check

# The images' hash-pinned locks (operator/locks/, trainer/locks/) from the pinned lists; PyPI, seconds.
.PHONY: locks
locks: setup-op ## regenerate the images' locks after a change to a requirements*.txt (deploy/images/lock.py)
	$(OP)/python deploy/images/lock.py

cluster-build: ## build etcd, kube-apiserver, kube-controller-manager, training-operator (cached)
	bash devcluster/build.sh

test-unit: setup-op ## pure functions, seconds
	$(OP)/pytest -q tests/unit

.PHONY: docs
docs: setup-op ## regenerate the CRD (from operator/dtr_operator/fields.py) and the docs' generated sections (RBAC, columns, spec fields, reasons)
	$(OP)/python docs/gen.py

test-trainer: setup-trainer setup-op ## real multi-process TensorFlow runs; the operator-trainer contract
	$(TR)/pytest -q tests/trainer

.PHONY: bench-trainer
bench-trainer: setup-trainer ## MWMS scaling efficiency (2 pinned workers vs 2 independent) -> bench/trainer/results.{json,md}
	$(TR)/python -m bench.trainer.run_bench $(ARGS)

.PHONY: bench-trainer-overhead
bench-trainer-overhead: setup ## time outside the epochs of dtr run examples/digits.yaml (ARGS="--baseline REF") -> bench/trainer/results-overhead.{json,md}
	$(OP)/python -m bench.trainer.overhead $(ARGS)

test-integration: setup-op cluster-build ## the operator against a real local control plane
	$(OP)/pytest -q tests/integration

test-e2e: setup ## `dtr run` end to end: real TF worker processes, no cluster
	$(OP)/pytest -q tests/e2e

# The real node (docs/cluster.md): containerd, runc, CNI, kubelet, kube-scheduler, kube-proxy, CoreDNS,
# local-path, as k3s bundles them; built and cached like the control plane. Needs root.
.PHONY: node-build test-node multinode-build test-multinode
node-build: cluster-build ## build the node's parts (containerd, runc, CoreDNS, local-path, their images; cached)
	bash devcluster/build_node.sh

test-node: setup images node-build ## both images as pods on a real node: kubectl apply -> Succeeded, faults, security
	$(OP)/pytest -q tests/node

multinode-build: node-build ## several nodes' extra part: flanneld and its CNI plugin (cached)
	bash devcluster/build_node.sh flannel

test-multinode: setup images multinode-build ## several real nodes: pods, policies, a run across nodes, one with no volume (S3: s3-build), node faults
	$(OP)/pytest -q tests/multinode

# A real S3 server (SeaweedFS, devcluster/s3.py; docs/cluster.md#an-s3-server): not in node-build, 6-10 min cold.
.PHONY: s3-build test-s3
s3-build: ## build SeaweedFS's weed and its image from source, an S3 server for the tests and the dev cluster (cached)
	bash devcluster/build_node.sh seaweedfs

# DTR_S3_REQUIRED: here a server that was not built fails the tier instead of skipping it.
# The trainer's Python runs S3_TF_TESTS (TensorFlow); both Pythons run S3_BOTH_TESTS (the product's S3 client,
# dtr_contract.objectstore, which the trainer's 3.9 and the operator's 3.11 import).
S3_TF_TESTS := tests/s3/test_s3_tensorflow.py tests/s3/test_export_s3.py tests/s3/test_s3_dataset.py tests/s3/test_backup_s3.py tests/s3/test_s3_faults.py
S3_BOTH_TESTS := tests/s3/test_objectstore_server.py
test-s3: setup s3-build ## a real S3 server as a local process (and with DTR_NODE_DIR as a pod on that node): put, get, list, delete; TensorFlow's s3://
	DTR_S3_REQUIRED=1 $(OP)/pytest -q tests/s3 $(addprefix --ignore=,$(S3_TF_TESTS))
	DTR_S3_REQUIRED=1 $(TR)/pytest -q $(S3_TF_TESTS) $(S3_BOTH_TESTS)

# A real MLflow tracking server (the mlflow package's, its SQLite store) as a local process, from an environment of its
# own: never the trainer's (the trainer speaks MLflow's REST API with the standard library, docs/tracking.md).
VENV_MLFLOW := .venv/mlflow
$(VENV_MLFLOW)/bin/mlflow: tests/mlflow/requirements.txt | $(UV)
	@$(DOCTOR) -q setup-op
	$(PY_OP) -m venv --without-pip $(VENV_MLFLOW)
	$(UV_INSTALL) $(VENV_MLFLOW)/bin/python -r tests/mlflow/requirements.txt
	touch $@

.PHONY: setup-mlflow test-mlflow
setup-mlflow: $(VENV_MLFLOW)/bin/mlflow ## the MLflow server's own environment (.venv/mlflow, pinned: tests/mlflow/requirements.txt)

# DTR_MLFLOW_REQUIRED: here a missing server fails the tier instead of skipping it.
test-mlflow: setup-trainer setup-mlflow ## a real 2-worker run logged to a real MLflow server (local process): params, per-epoch figures, the version registered; a dead and a silent server
	DTR_MLFLOW_REQUIRED=1 $(TR)/pytest -q -rs tests/mlflow

.PHONY: test-s3-local
test-s3-local: setup s3-build ## the S3 server as a local process only, through a client and through TensorFlow's s3:// (what CI runs: tests/tiers.py)
	DTR_S3_REQUIRED=1 $(OP)/pytest -q tests/s3/test_s3_server.py tests/s3/test_published_server.py tests/s3/test_dtr_run_s3.py $(S3_BOTH_TESTS)
	DTR_S3_REQUIRED=1 $(TR)/pytest -q $(S3_TF_TESTS) $(S3_BOTH_TESTS)

test-fast: lint test-unit ## lint and unit tests only

# Every tier in one run (tests/tiers.py): each build and the real node's start paid once, two steps at a time,
# each as soon as the steps it needs have passed; where the time went printed at the end, a warm tier over 1.5x
# its budget fails the run.
test: setup-op ## everything CI runs (.ci/run): every tier below, each cost paid once; ARGS="--only STEP ...", "--skip STEP ...", "--slots N"
	$(OP)/python tests/tiers.py run $(ARGS)

run: setup ## train examples/digits.yaml locally, no cluster
	$(OP)/dtr run examples/digits.yaml

# examples/quickstart.ipynb headless, every cell in a kernel of the op environment (docs/client.md#the-notebook).
.PHONY: notebook pictures
BACKEND ?= auto
notebook: setup ## execute examples/quickstart.ipynb headless (BACKEND=auto|local|cluster); fails on the first failing cell
	$(OP)/python docs/pictures.py --notebook-only --backend $(BACKEND)

pictures: setup ## draw the docs' pictures (docs/img/) from a real local run of examples/quickstart.ipynb
	$(OP)/python docs/pictures.py

# The local stack in the background (docs/cluster.md): control plane, real node, training-operator and
# the operator as pods (deploy/install.sh). Needs root.
.PHONY: dev-cluster dev-cluster-kueue dev-cluster-down
DEV_CLUSTER ?= .dtr/dev-cluster
NODES ?= 1
S3 ?=
ifneq ($(S3),)
ifneq ($(NODES),1)
$(error S3=1 is for the single node (NODES=1))
endif
endif
dev-cluster: setup images node-build $(if $(S3),s3-build) ## start the local cluster (NODES=3: several nodes; S3=1: an S3 server too) with the operator; prints KUBECONFIG
ifeq ($(NODES),1)
	$(OP)/python -m devcluster.node up --install $(if $(S3),--s3) --dir $(DEV_CLUSTER)
else
	$(MAKE) --no-print-directory multinode-build
	$(OP)/python -m devcluster.cluster up --install $(if $(S3),--s3) --nodes $(NODES) --dir $(DEV_CLUSTER)
endif

dev-cluster-kueue: ## install Kueue (built here, upstream's manifests) into the running dev-cluster (docs/scheduling.md)
	KUBECONFIG=$(DEV_CLUSTER)/control-plane/kubeconfig $(OP)/python -m devcluster.kueue install

PURGE ?=
dev-cluster-down: ## stop everything dev-cluster started (either kind); PURGE=1: and free its disk (images, volumes)
	if [ -d $(DEV_CLUSTER)/nodes ]; then $(OP)/python -m devcluster.cluster down $(if $(PURGE),--purge) --dir $(DEV_CLUSTER); \
	else $(OP)/python -m devcluster.node down $(if $(PURGE),--purge) --dir $(DEV_CLUSTER); fi

# Reliability and security suite (docs/reliability.md): invalid runs, generated specs, faults, Pod Security.
# Writes .dtr/reliability/results.json, then the doc from it (even when red); its cost: docs/cluster.md#what-ci-costs.
.PHONY: test-reliability
test-reliability: setup cluster-build images node-build ## invalid runs, hypothesis specs, control-plane, node and volume faults, Pod Security; writes docs/reliability.md
	rm -f .dtr/reliability/results.json .dtr/reliability/results.session.json
	$(OP)/pytest -q tests/reliability; status=$$?; $(OP)/python tests/reliability/report.py; exit $$status

# Deploy: linters for the scripts and Dockerfiles; the k3d quickstart (docs/k3d.md, needs Docker).
.PHONY: lint-deploy k3d-up k3d-down
VENV_LINT := .venv/lint

$(VENV_LINT)/bin/hadolint: deploy/requirements-lint.txt | $(UV)
	@$(DOCTOR) -q lint-deploy
	$(PY_OP) -m venv --without-pip $(VENV_LINT)
	$(UV) pip install -q --python $(VENV_LINT)/bin/python -r deploy/requirements-lint.txt
	touch $@

lint-deploy: $(VENV_LINT)/bin/hadolint ## shellcheck the deploy and node scripts and ./dtr, hadolint the Dockerfiles
	$(VENV_LINT)/bin/shellcheck -o all deploy/*.sh deploy/k3d/*.sh deploy/images/*.sh devcluster/build_node.sh dtr
	$(VENV_LINT)/bin/hadolint Dockerfile.*

k3d-up: ## k3d cluster + images + training-operator + operator, train an example
	bash deploy/k3d/up.sh

k3d-down: ## delete the k3d cluster (ARGS=--purge also deletes the model volume)
	bash deploy/k3d/down.sh $(ARGS)

# Images (docs/images.md): a running Docker engine, the python:3.X-slim bases (local stand-ins
# built with debootstrap when no registry answers), both images, and tests that run them.
.PHONY: docker-up base-images images test-images
docker-up: ## start dockerd unless a Docker engine answers (CI=true as root: installs docker.io)
	bash deploy/images/docker-up.sh

base-images: docker-up ## python:3.11-slim, python:3.9-slim: pull, else local stand-ins (offline fallback)
	bash deploy/images/base-images.sh

images: ## build both images (names: deploy/lib.sh; ARGS go to docker build)
	bash deploy/images/build.sh $(ARGS)

# docs/clusters.md: both images on a registry your cluster pulls from, and the overlay that deploys them.
.PHONY: push
push: ## tag and push both images to REGISTRY=host[:port][/path]; writes .dtr/deploy-registry (kubectl apply -k it)
	@[ -n '$(REGISTRY)' ] || { echo 'usage: make push REGISTRY=host[:port][/path] (e.g. registry.example.com:5000/ml)' >&2; exit 2; }
	bash deploy/images/push.sh '$(REGISTRY)'

test-images: images setup-op ## run both images as uid 1000, read-only: TF, training, 2 workers, the operator
	$(OP)/pytest -q tests/images

clean: ## remove environments and local run output
	rm -rf .venv .dtr

# Operator benchmark (docs/performance.md): its own control plane and 200 runs; minutes, not part of `make test`.
.PHONY: bench-operator
$(VENV_OP)/.bench-operator: bench/operator/requirements.txt $(OP)/dtr
	$(OP)/pip install -q -r bench/operator/requirements.txt
	touch $@

bench-operator: setup-op cluster-build $(VENV_OP)/.bench-operator ## operator latency/throughput/RSS vs the training-operator -> bench/operator/results.*
	$(OP)/python -m bench.operator.run $(ARGS)

.PHONY: bench-gobuild
bench-gobuild: setup-op cluster-build ## a cold Go build (etcd) with devcluster/goenv.sh against GOGC=100 and against DWARF -> bench/gobuild/results.*
	$(OP)/python -m bench.gobuild.run $(ARGS)

.PHONY: bench-nodestart
bench-nodestart: setup images node-build ## a node's up --install with the images' seed and with it made first (root) -> bench/nodestart/results.*
	$(OP)/python -m bench.nodestart.run $(ARGS)

.PHONY: bench-progress
bench-progress: setup images node-build ## status.progress latency, epoch end -> kubectl get, on the real node (root) -> bench/progress/results.*
	$(OP)/python -m bench.progress.run $(ARGS)

.PHONY: bench-restart-policy
bench-restart-policy: setup images node-build ## restartPolicy OnFailure vs ExitCode on the real node (root): permanent error, killed worker, OOM loop -> bench/restartpolicy/results.*
	$(OP)/python -m bench.restartpolicy.run $(ARGS)

.PHONY: bench-journeys
bench-journeys: setup images node-build ## each docs journey timed as a user runs it (local, own model, a failure, dev cluster, apply -> model, install) -> bench/journeys/results.json (ARGS=--local-only: no root)
	$(OP)/python -m bench.journeys.run $(ARGS)

.PHONY: bench-e2e
bench-e2e: setup images node-build ## time to a model on the real node (root): the book's plain TFJob vs the same training as a DistTrainingRun -> bench/e2e/results.*
	$(OP)/python -m bench.e2e.run $(ARGS)

.PHONY: bench-sweep
bench-sweep: setup images node-build ## a sweep of 8 trials with early stopping vs without, on the real node (root) -> bench/sweep/results.*
	$(OP)/python -m bench.sweep.run $(ARGS)

.PHONY: sweep-acceptance
sweep-acceptance: setup images node-build setup-mlflow ## issue 42's acceptance run on the real node (root): own model, Kueue, MLflow, plot -> bench/sweep/acceptance.*
	$(OP)/python -m bench.sweep.acceptance $(ARGS)

.PHONY: bench-multinode
bench-multinode: setup images multinode-build ## a run across two nodes vs on one node, three real nodes (root) -> bench/multinode/results.*
	$(OP)/python -m bench.multinode.run $(ARGS)

.PHONY: bench-scaling
bench-scaling: setup images node-build ## MWMS scaling in pods of 1 CPU against its ceiling, on the real node (root) -> bench/scaling/results.*
	$(OP)/python -m bench.scaling.run $(ARGS)
