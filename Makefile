# tfcluster — `make help` lists every target. Logic lives in Python and Ansible; recipes are one-line calls.
# The variables below reach the `tfcluster` command as environment variables (never through a shell or Jinja);
# it checks every one before anything runs.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
MAKEFLAGS += --no-print-directory

##@ Variables (override on the command line: make train CLUSTER=onprem HOSTS=inventory/onprem.yml)
CLUSTER  ?= local## local (emulated AWS on loopback, workers are local processes) | aws | onprem | slurm
WORKERS  ?= 2## number of workers for CLUSTER=local
JOB      ?= mnist## job id: a finished job is not retrained; a new id is a new job
STRATEGY ?= auto## auto | multi_worker_mirrored | parameter_server | mirrored | tpu
HOSTS    ?= inventory/onprem.yml## on-prem host file (CLUSTER=onprem)
SLURM    ?=## CLUSTER=slurm: the cluster file (login node, partition, nodes, shared dir, python; examples/slurm.example.yml)
SCRIPT   ?=## bring your own training script instead of the built-in trainer
SCRIPT_ARGS ?=## arguments of SCRIPT (split like a shell would, passed as literal arguments)
SCRIPT_REQUIREMENTS ?=## hash-pinned requirements of SCRIPT, installed for the job alone (make lock SCRIPT_REQUIREMENTS=FILE writes FILE.lock)
KERAS    ?= legacy## SCRIPT jobs: legacy (tf-keras, works under every strategy) | 3 (a script written for Keras 3)
DATASETS ?=## SCRIPT jobs: datasets copied to every host's dataset dir (TFCLUSTER_DATASETS), e.g. mnist
TRAINER_ARGS ?=## extra arguments of the built-in trainer
EPOCHS   ?=## override the trainer's epoch count
MAX_DURATION ?=## job deadline, e.g. 4h: every task saves a backup and stops; a re-run resumes
STALL    ?=## time without progress that stops the job, e.g. 20m, or off (default 10m while the trainer trains; off for SCRIPT)
UNREACHABLE_GRACE ?=## how long a host may stay unreachable from this machine before the job fails (default 30m)
STRAGGLER ?=## a task this far under the others' pace is named: 15% (default, for 2 min), 25%,5m, or off
HANG   ?=## no task stepping for this many times its usual step time is a hang, stacks shown: 10 (default) or off
NETCHECK ?=## the network check before the start: on (default: each link measured, slow ones named), strict, off
RECOVER ?=## CLUSTER=aws: replace a lost host alone and resume, up to N times (default 1 on spot clusters, else 0)
ALLOW_SHARED_NETWORK ?=## CLUSTER=local: 1 runs the slots where no private network namespace can be made (refused by default), their training ports open to this machine's users and network
VERBOSE  ?=## 1: show Terraform's and Ansible's whole output (always in artifacts/<cluster>/<job>/logs/)
AUTO_APPROVE ?=## set to 1 to apply/destroy on AWS without the confirmation prompt
IDLE     ?=## autostop: idle time before a host powers itself off: 10 (minutes), 30m, 2h, off (provision: the boot guard's)
MODE     ?=## autostop: jobs | jobs_and_ssh (an SSH login keeps a host up too)
DOWN     ?=## CLUSTER=aws: 1 an idle host terminates instead of stopping (provision, autostop)
TTL      ?=## CLUSTER=aws: cluster lifetime in the tfcluster:expires tag (default 24h; off); the hosts power off after it
AMI      ?=## CLUSTER=aws provision: refresh replaces every host with the newest image (the image is kept otherwise)
ALL_OR_NOTHING ?=## CLUSTER=aws provision: 1 tears down what launched when not every slot could be launched
FORCE    ?=## destroy, provision AMI=refresh: 1 goes on even when a finished job was never collected
YES      ?=## clean-artifacts: 1 deletes without asking
HOST     ?=## logs: the host whose job log to follow (default the chief)
PREPARE  ?=## force: run every prepare role even where the prepared digest says nothing changed
GPU      ?=## wheelhouse: 1 adds the CUDA wheels (an air-gapped GPU cluster)
PYTEST_ARGS ?=## extra pytest arguments, e.g. -k inventory, or a test path (make test PYTEST_ARGS=tests/unit/core)
BASE     ?=## test-changed: compare with this git ref (default: the uncommitted changes)
TEST_WORKERS ?= 6## make test: pytest-xdist workers (four groups of tests run in one worker each; waits on hosts and timers overlap)
ANSIBLE_ARGS ?=## extra ansible-playbook arguments (trusted), e.g. -e tf_job_stall_timeout=120
WHEELHOUSE ?= .cache/lab/wheelhouse## CLUSTER=onprem: air-gapped install from this wheelhouse (python -m tfcluster.prepare.wheelhouse)
export CLUSTER WORKERS JOB STRATEGY HOSTS SLURM SCRIPT SCRIPT_ARGS SCRIPT_REQUIREMENTS KERAS TRAINER_ARGS EPOCHS
export BASE MAX_DURATION VERBOSE AUTO_APPROVE FORCE HOST ANSIBLE_ARGS WHEELHOUSE YES IDLE MODE DOWN TTL DATASETS PREPARE
export STALL UNREACHABLE_GRACE STRAGGLER HANG NETCHECK RECOVER ALLOW_SHARED_NETWORK
export AMI ALL_OR_NOTHING

VENV := .venv
PY   := $(VENV)/bin/python
TFC  := $(VENV)/bin/tfcluster
# The suites write bytecode whatever the shell says: with PYTHONDONTWRITEBYTECODE set, every process (each pytest
# worker's collection and assertion rewriting, every tfcluster, inventory and ansible-playbook run loading the
# collection's plugins) compiled the project's modules again (collection: 7.0 CPU-s a worker, 2.6 with bytecode).
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(PY) -m pytest
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
# Terraform's provider source (docs/infra.md): CLUSTER=aws uses the public registry, CLUSTER=local the offline mirror
# of aws 3.39 in .cache/terraform. Plain environment variables: TFCLUSTER_TF_MIRROR=1 (aws from the mirror: offline
# development and the AWS twin test), TFCLUSTER_TF_REGISTRY=1 (local from the registry).

##@ The two commands
.PHONY: demo
demo: setup ## Whole job end to end on the embedded local cluster (emulated AWS + local workers), then a summary
	$(TFC) demo

.PHONY: test
test: setup-lab ## Every test suite (unit, integration, lab), in parallel (pytest-xdist); installs what it needs first
	$(PYTEST) -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

##@ Cluster lifecycle
.PHONY: provision
provision: setup-cluster ## Create the machines (local: emulated AWS on loopback; aws: infra/aws + terraform.tfvars)
	$(TFC) provision

.PHONY: plan
plan: setup-cluster ## Terraform plan and every planned host's TF_CONFIG; touches no host
	$(TFC) plan

.PHONY: train
train: setup-cluster ## Prepare hosts, gang-start the job, wait (fail fast), collect the chief's checkpoint
	$(TFC) train

.PHONY: wait
wait: setup-cluster ## Re-attach to a running job (after Ctrl-C or a closed terminal): wait for it, then collect
	$(TFC) wait

.PHONY: collect
collect: setup-cluster ## Bring the chief's checkpoint into artifacts/<cluster>/<job>/ and verify it
	$(TFC) collect

.PHONY: status
status: setup-cluster ## Each task's state and progress
	$(TFC) status

.PHONY: stacks
stacks: setup-cluster ## Every task's Python stacks, the task behind first (py-spy on each host; a job that seems stuck)
	$(TFC) stacks

.PHONY: logs
logs: setup-cluster ## Follow the chief's job log live (HOST=name: that host's); ends with the job or Ctrl-C
	$(TFC) logs

.PHONY: stop
stop: setup-cluster ## Stop every task of the job
	$(TFC) stop

.PHONY: autostop
autostop: setup-cluster ## Change a running cluster's idle autostop: IDLE=10|30m|off [MODE=jobs_and_ssh] [DOWN=1]
	$(TFC) autostop

.PHONY: clusters
clusters: setup-cluster ## Every tfcluster cluster in the region (EC2 tags): age, instances, state, expiry, est. $/hour
	$(TFC) clusters

.PHONY: start
start: setup-cluster ## Start a stopped cluster (autostop stops idle hosts), refresh its addresses; then `make train` resumes
	$(TFC) start

.PHONY: slurm-up
slurm-up: setup-cluster ## Make the hosts (CLUSTER=onprem HOSTS=..., or aws) one Slurm cluster; writes a cluster file for CLUSTER=slurm
	$(TFC) slurm-up

.PHONY: destroy
destroy: setup-cluster ## Tear the machines down (checks that no tagged instance is left)
	$(TFC) destroy

.PHONY: prune-artifacts
prune-artifacts: setup-cluster ## Remove the older verified copies of JOB (the current one stays)
	$(TFC) prune

.PHONY: tf-upgrade
tf-upgrade: setup-cluster ## Upgrade the aws provider of infra/<CLUSTER> to the newest allowed (terraform init -upgrade; new lock file)
	$(TFC) tf-upgrade

.PHONY: clean
clean: ## Remove local job state (.cache/local); keeps artifacts, .venv and downloads
	rm -rf .cache/local

.PHONY: clean-artifacts
clean-artifacts: setup-cluster ## Delete every collected artifact under artifacts/ (asks first; YES=1 answers yes)
	$(TFC) clean-artifacts

##@ Development
.PHONY: help
help: ## Show this help
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make \033[36m<target>\033[0m [VAR=value]\n"} \
	  /^[a-zA-Z_-]+:.*?##/ { printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2 } \
	  /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } \
	  /^[A-Z_]+ +\?=.*##/ { split($$0, a, "##"); split(a[1], n, " "); printf "  \033[33m%-16s\033[0m %s\n", n[1], a[2] }' $(MAKEFILE_LIST)

.PHONY: setup
setup: ## Create .venv and fetch every offline cache (idempotent; Linux, Python >= 3.11)
	@bash tools/setup.sh

# What a cluster command needs: everything for CLUSTER=local (the trainer runs here), only the control machine's
# packages for aws and onprem (no TensorFlow, emulator or test tools; macOS too, Python >= 3.10).
.PHONY: setup-cluster
setup-cluster:
	@bash tools/setup.sh $(if $(filter local,$(CLUSTER)),full,control)

.PHONY: test-unit
test-unit: setup ## Fast tests only (no TensorFlow workers, terraform or lab), in parallel
	$(PYTEST) -n 2 tests/unit $(PYTEST_ARGS)

.PHONY: test-changed
test-changed: setup ## The unit tests of the folders your uncommitted changes (or BASE=<git ref>) touch
	$(PY) tools/changed_tests.py $(PYTEST_ARGS)

.PHONY: test-integration
test-integration: setup ## Integration tests (real tools on loopback)
	$(PYTEST) tests/integration $(PYTEST_ARGS)

.PHONY: test-lab
test-lab: setup-lab ## The multi-host lab suite alone (root; systemd-nspawn hosts)
	$(PYTEST) tests/lab $(PYTEST_ARGS)

.PHONY: test-molecule
test-molecule: setup ## Molecule scenario default (delegated driver, localhost, throw-away prefix)
	$(VENV)/bin/molecule test -s default

.PHONY: lint
lint: setup ## ruff (with complexity), ansible-lint (production profile), terraform fmt, checkov
	$(PY) -m ruff check .
	$(VENV)/bin/ansible-lint --offline playbooks/ molecule/default/
	bash tools/sanity.sh
	terraform fmt -check -recursive -diff infra
	.cache/venvs/checkov/bin/checkov -d infra --framework terraform --skip-download --quiet --compact

# SCRIPT_REQUIREMENTS reaches tfcluster.prepare.lock through the environment (never through a shell), like every variable.
.PHONY: lock
lock: setup ## Regenerate the hash-pinned host requirements (python_runtime's locks); SCRIPT_REQUIREMENTS=FILE: write FILE.lock
	$(PY) -m tfcluster.prepare.lock $(if $(SCRIPT_REQUIREMENTS),script,compile)

.PHONY: lock-control
lock-control: setup ## Regenerate requirements-control.lock (hash-pinned; TFCLUSTER_LOCKED=1 make setup-cluster installs it)
	$(PY) -m tfcluster.prepare.lock control

.PHONY: wheelhouse
wheelhouse: setup ## Build the air-gapped wheelhouse for on-prem hosts from the locks (GPU=1: with the CUDA wheels)
	$(PY) -m tfcluster.prepare.wheelhouse $(if $(filter 1,$(GPU)),--gpu)

.PHONY: bench
bench: setup ## Benchmarks (print ratios measured in one run)
	$(PY) -m bench.inventory_build
	$(PY) -m bench.train_throughput
	$(PY) -m bench.malloc_pad
	$(PY) -m bench.wait_poll
	$(PY) -m bench.scaling

##@ Lab of real hosts (root: systemd-nspawn hosts on a private bridge; docs/lab.md)
LAB_HOSTS ?= 3## lab-up: number of hosts (a chief and LAB_HOSTS-1 workers)

.PHONY: setup-lab
setup-lab: ## setup, and the lab: debootstrap, systemd-container, nftables, the cached rootfs, the hosts' wheelhouse (root)
	@bash tools/setup.sh full lab

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
