# tfcluster — `make help` lists every target. Logic lives in Python and Ansible; recipes are one-line calls.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
MAKEFLAGS += --no-print-directory

##@ Variables (override on the command line: make train CLUSTER=onprem HOSTS=inventory/onprem.yml)
CLUSTER  ?= local## local (emulated AWS on loopback, workers are local processes) | aws | onprem
WORKERS  ?= 2## number of workers for CLUSTER=local
JOB      ?= mnist## job id: a finished job is not retrained; a new id is a new job
STRATEGY ?= auto## auto | multi_worker_mirrored | parameter_server | mirrored | tpu
HOSTS    ?= inventory/onprem.yml## on-prem host file (CLUSTER=onprem)
SCRIPT   ?=## bring your own training script instead of the built-in trainer
SCRIPT_ARGS ?=## arguments of SCRIPT
SCRIPT_REQUIREMENTS ?=## requirements file of SCRIPT (installed into the runtime venv)
TRAINER_ARGS ?=## extra arguments of the built-in trainer
AUTO_APPROVE ?=## set to 1 to apply/destroy on AWS without the confirmation prompt
EPOCHS   ?=## override the trainer's epoch count
PYTEST_ARGS ?=## extra pytest arguments, e.g. -k inventory
ANSIBLE_ARGS ?=## extra ansible-playbook arguments, e.g. -e tf_job_stall_timeout=120
WHEELHOUSE ?= .cache/lab/wheelhouse## CLUSTER=onprem: air-gapped install from this wheelhouse (python -m tfcluster.wheelhouse)

VENV := .venv
PY   := $(VENV)/bin/python
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
# The project's Terraform CLI config: the aws provider from the offline mirror in .cache/terraform
# (TFCLUSTER_TF_REGISTRY=1: the public registry, for a machine with internet). Overrides the machine's own.
export TF_CLI_CONFIG_FILE := $(CURDIR)/.cache/terraform/terraformrc$(if $(filter 1,$(TFCLUSTER_TF_REGISTRY)),.registry)
export TFCLUSTER_CLUSTER ?= tfcluster-$(CLUSTER)
export TFCLUSTER_STRATEGY := $(STRATEGY)
export TFCLUSTER_WORKERS := $(WORKERS)
ifeq ($(CLUSTER),onprem)
export TFCLUSTER_SOURCE := static
export TFCLUSTER_HOSTS_FILE := $(HOSTS)
else
export TFCLUSTER_SOURCE := terraform
export TFCLUSTER_TF_DIR := $(CURDIR)/infra/$(CLUSTER)
endif
INVENTORY := inventory/tfcluster.py
PLAYBOOK_VARS := -e tfcluster_job=$(JOB) -e tfcluster_cluster=$(CLUSTER) $(if $(SCRIPT),-e tfcluster_script=$(SCRIPT)) $(if $(EPOCHS),-e tfcluster_epochs=$(EPOCHS))
PLAYBOOK_VARS += $(if $(filter onprem,$(CLUSTER)),$(if $(wildcard $(WHEELHOUSE)),-e python_runtime_wheelhouse=$(abspath $(WHEELHOUSE))))
PLAYBOOK_VARS += $(ANSIBLE_ARGS) $(if $(SCRIPT_ARGS),-e "tfcluster_script_args='$(SCRIPT_ARGS)'") $(if $(SCRIPT_REQUIREMENTS),-e tfcluster_script_requirements=$(SCRIPT_REQUIREMENTS)) $(if $(TRAINER_ARGS),-e "tfcluster_trainer_args='$(TRAINER_ARGS)'")

##@ The two commands
.PHONY: demo
demo: setup ## Whole job end to end on the embedded local cluster (emulated AWS + local workers), then a summary
	$(MAKE) provision CLUSTER=local
	$(MAKE) train CLUSTER=local
	$(PY) -m tfcluster.summary --artifacts artifacts/local/$(JOB)

.PHONY: test
test: setup setup-lab ## Every test suite (unit, integration, lab); installs what it needs first
	$(PY) -m pytest $(PYTEST_ARGS)

##@ Development
.PHONY: help
help: ## Show this help
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make \033[36m<target>\033[0m [VAR=value]\n"} \
	  /^[a-zA-Z_-]+:.*?##/ { printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2 } \
	  /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } \
	  /^[A-Z_]+ +\?=.*##/ { split($$0, a, "##"); split(a[1], n, " "); printf "  \033[33m%-16s\033[0m %s\n", n[1], a[2] }' $(MAKEFILE_LIST)

.PHONY: setup
setup: ## Create .venv and fetch every offline cache (idempotent)
	bash tools/setup.sh

.PHONY: test-unit
test-unit: setup ## Fast tests only (no TensorFlow workers, terraform or lab)
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

.PHONY: test-integration
test-integration: setup ## Integration tests (real tools on loopback)
	$(PY) -m pytest tests/integration $(PYTEST_ARGS)

.PHONY: test-lab
test-lab: setup setup-lab ## The multi-host lab suite alone (root; systemd-nspawn hosts)
	$(PY) -m pytest tests/lab $(PYTEST_ARGS)

.PHONY: test-molecule
test-molecule: setup ## Molecule scenario default (delegated driver, localhost, throw-away prefix)
	$(VENV)/bin/molecule test -s default

.PHONY: lint
lint: setup ## ruff, ansible-lint (production profile), terraform fmt
	$(PY) -m ruff check .
	$(VENV)/bin/ansible-lint --offline playbooks/ molecule/default/
	$(PY) -m tfcluster.terraform fmt-check

.PHONY: bench
bench: setup ## Benchmarks (print ratios measured in one run)
	$(PY) -m bench.inventory_build
	$(PY) -m bench.train_throughput
	$(PY) -m bench.scaling

##@ Lab of real hosts (root: systemd-nspawn hosts on a private bridge; docs/lab.md)
LAB_HOSTS ?= 3## lab-up: number of hosts (a chief and LAB_HOSTS-1 workers)

.PHONY: setup-lab
setup-lab: setup ## Install debootstrap + systemd-container and build the cached lab rootfs (root only)
	@if [ "$$(id -u)" = 0 ]; then $(PY) -m lab setup && $(PY) -m tfcluster.wheelhouse; else echo "skipping lab setup (needs root)"; fi

.PHONY: lab-up
lab-up: setup-lab ## Boot a lab of real hosts and write its on-prem host file (see docs/lab.md)
	$(PY) -m lab up --hosts $(LAB_HOSTS)

.PHONY: bench-lab
bench-lab: setup-lab ## Lab benchmarks: runtime install, first step, no-op re-run 4 vs 1 hosts, fail-fast, collector
	$(PY) -m bench.lab_runtime_install
	$(PY) -m bench.lab_flows

.PHONY: lab-down
lab-down: ## Stop every lab; removes bridges, mounts, cgroups (safe to re-run)
	$(PY) -m lab down --all

.PHONY: lab-status
lab-status: ## Lab hosts: address, slot, link, SSH, memory
	$(PY) -m lab status

##@ Cluster lifecycle
.PHONY: provision
provision: setup ## Create the machines (local: emulated AWS on loopback; aws: infra/aws + terraform.tfvars)
	$(PY) -m tfcluster.provision apply --cluster $(CLUSTER) $(if $(AUTO_APPROVE),--auto-approve)

.PHONY: plan
plan: setup ## Terraform plan and every planned host's TF_CONFIG; touches no host
	$(if $(filter onprem,$(CLUSTER)),$(PY) $(INVENTORY) --tf-config all,$(PY) -m tfcluster.provision plan --cluster $(CLUSTER))

.PHONY: train
train: setup ## Prepare hosts, gang-start the job, wait (fail fast), collect the chief's checkpoint
	$(VENV)/bin/ansible-playbook -i $(INVENTORY) playbooks/train.yml $(PLAYBOOK_VARS)

.PHONY: collect
collect: ## Bring the chief's checkpoint into artifacts/<cluster>/<job>/ and verify it
	$(VENV)/bin/ansible-playbook -i $(INVENTORY) playbooks/collect.yml $(PLAYBOOK_VARS)

.PHONY: status
status: ## Each host's unit state and progress
	$(VENV)/bin/ansible-playbook -i $(INVENTORY) playbooks/status.yml $(PLAYBOOK_VARS)

.PHONY: logs
logs: ## The chief's log
	$(VENV)/bin/ansible-playbook -i $(INVENTORY) playbooks/status.yml $(PLAYBOOK_VARS) -e tfcluster_show_logs=true --limit chief:worker[0]

.PHONY: stop
stop: ## Stop every unit of the job
	$(VENV)/bin/ansible-playbook -i $(INVENTORY) playbooks/stop.yml $(PLAYBOOK_VARS)

.PHONY: destroy
destroy: setup ## Remove everything provision created (local: checks 0 instances left, stops the endpoint)
	$(PY) -m tfcluster.provision destroy --cluster $(CLUSTER) $(if $(AUTO_APPROVE),--auto-approve)

.PHONY: clean
clean: ## Remove artifacts and local job state (keeps .venv and .cache downloads)
	rm -rf artifacts .cache/local
