#!/usr/bin/env bash
# `make lint`'s ansible-test sanity of the collection tfcluster.cluster (validate-modules: the modules' documentation
# against their argument specs, the doc fragment, the plugin layout). ansible-test builds its own venv and fetches
# pip's bootstrap script from ci-files.testing.ansible.com, which is unreachable offline: where that script is not
# cached, a stand-in that runs `python -m ensurepip` is put in its place (the requirements then come from PyPI).
# GPLv3 headers are not asked of this Apache-2.0 collection (tests/sanity/ignore-2.19.txt says so per file).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${HOME}/.ansible/test/cache"
mkdir -p "$cache"
for script in get_pip_24_2.py; do
  [ -s "$cache/$script" ] || cat >"$cache/$script" <<'PY'
"""Stand-in for ansible-test's pip bootstrap (written by tfcluster's tools/sanity.sh): ensurepip gives the venv pip."""
import subprocess
import sys

subprocess.run([sys.executable, "-m", "ensurepip", "--upgrade", "--default-pip"], check=True)
PY
done
cd "$root/playbooks/collections/ansible_collections/tfcluster/cluster"
exec "$root/.venv/bin/ansible-test" sanity --test validate-modules --python "$("$root/.venv/bin/python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')" "$@"
