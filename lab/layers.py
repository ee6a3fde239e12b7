"""The prepared runtime layer: the Python runtime (the venv with TensorFlow from the wheelhouse, the wheelhouse copy,
the lock) installed once per test run by the real python_runtime role on one fresh lab host, then stacked under the
hosts of every lab that needs prepared hosts (an overlay lower layer between the host's own upper dir and the rootfs).

    layer = runtime_layer(wheelhouse)              # cached under .cache/lab/layers/runtime-<digest>/
    Lab(..., layers=(layer,))                      # its hosts boot with the runtime in place

Each lab host installing TensorFlow from the wheelhouse again (the wheelhouse copied over SSH, a 600 MB wheel
unpacked, per host) is what the prepare of a lab spends its minutes on; the role's own probe then finds the runtime
in place on every host of such a lab and installs nothing. The layer is keyed by what the role would install (the
rootfs, the role, the locks, the wheelhouse's listing): a change to any of them builds a new one. The install path
itself is still tested on a fresh host: tests/lab/test_runtime_install.py.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from lab.config import LabError
from lab.paths import LabPaths, default_lab_dir
from lab.rootfs import STAMP as ROOTFS_STAMP
from tfcluster.core.contract import WORKER
from tfcluster.core.files import tree_digest
from tfcluster.core.paths import REPO_ROOT, ROLES

log = logging.getLogger(__name__)

FORMAT = 1  # bump when what is kept or dropped below changes
LAYER_STAMP = ".tfcluster-layer.json"  # written last: the layer is whole
ROLE = ROLES / "python_runtime"
PLAYBOOK = Path(__file__).parent / "playbooks" / "runtime_layer.yml"
LAYER_LAB, LAYER_HOST = "ptlayer", "layer-0"
# What of the build host's upper dir is its own, not the runtime's: never stacked under another host.
HOST_OWN: tuple[str, ...] = (
    "etc/machine-id", "etc/hostname", "etc/hosts", "etc/systemd/network", "etc/ssh", "etc/sudoers.d",
    "root", "home", "tmp", "var/tmp", "var/log", "var/lib/systemd", "var/cache", "var/lib/apt", "run",
    "var/lib/dhcp", "etc/systemd/system/ssh.service.d",
)


def layer_key(wheelhouse: Path, rootfs: Path) -> str:
    """What the layer holds, as a digest: the rootfs's stamp, the role and its locks, the wheelhouse's listing."""
    wheels = sorted((p.name, p.stat().st_size) for p in wheelhouse.glob("*.whl"))
    stamp = (rootfs / ROOTFS_STAMP).read_text() if (rootfs / ROOTFS_STAMP).is_file() else ""
    material = {"format": FORMAT, "rootfs": stamp, "role": tree_digest(ROLE), "wheels": wheels}
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:16]


@contextmanager
def _build_lock(root: Path) -> Iterator[None]:
    """One build at a time on this machine (two xdist workers asking at once: the second waits, then reuses)."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "a+", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def runtime_layer(wheelhouse: Path, lab_dir: Path | None = None, timeout: float = 1500) -> Path:
    """The cached layer for this wheelhouse (built now when missing); raises LabError naming the failed step."""
    paths = LabPaths(lab_dir or default_lab_dir(), LAYER_LAB)
    layers = paths.root / "layers"
    with _build_lock(layers):
        from lab.admin import setup

        setup(paths.root)  # the rootfs the key is taken from must exist
        layer = layers / f"runtime-{layer_key(wheelhouse, paths.rootfs)}"
        if (layer / LAYER_STAMP).is_file():
            return layer
        for stale in layers.glob("runtime-*"):  # an older layer, or one whose build was cut short
            shutil.rmtree(stale, ignore_errors=True)
        started = time.monotonic()
        _build(layer, wheelhouse, paths, timeout)
        log.info("runtime layer %s built in %.0f s", layer.name, time.monotonic() - started)
        return layer


def _build(layer: Path, wheelhouse: Path, paths: LabPaths, timeout: float) -> None:
    from lab.flows import ANSIBLE_PLAYBOOK, INVENTORY, VENV_BIN
    from lab.lab import Lab

    lab = Lab(slots=(WORKER,), name=LAYER_LAB, names=(LAYER_HOST,), lab_dir=paths.root)
    try:
        lab.start()
        env = {**os.environ, **lab.inventory_env(), "ANSIBLE_CONFIG": str(REPO_ROOT / "ansible.cfg"),
               "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '')}", "ANSIBLE_NOCOLOR": "true"}
        argv = [str(ANSIBLE_PLAYBOOK), "-i", str(INVENTORY), str(PLAYBOOK),
                "-e", json.dumps({"python_runtime_wheelhouse": str(wheelhouse)})]
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, check=False)
        if proc.returncode != 0:
            raise LabError(f"building the runtime layer: {' '.join(argv)} exited {proc.returncode}:\n"
                           + proc.stdout[-4000:] + proc.stderr[-2000:])
        lab.stop_host(LAYER_HOST)  # a clean power-off: every file of the install on disk
        keep(lab.paths.host_dir(LAYER_HOST) / "upper", layer)
    finally:
        lab.down()


def keep(upper: Path, layer: Path) -> None:
    """The build host's upper dir, less what is the host's own (HOST_OWN), as ``layer`` (its stamp written last)."""
    tmp = layer.with_name(layer.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    subprocess.run(["cp", "-a", f"{upper}/.", str(tmp)], check=True, capture_output=True)
    for rel in HOST_OWN:
        target = tmp / rel
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        elif target.exists() or target.is_symlink():
            target.unlink()
    if not (tmp / "opt/tfcluster/venv/bin/python").exists():
        raise LabError(f"the runtime layer holds no venv ({tmp}/opt/tfcluster/venv): the role installed nothing")
    (tmp / LAYER_STAMP).write_text(json.dumps({"built_at": time.time()}) + "\n")
    tmp.rename(layer)
