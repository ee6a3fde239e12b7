"""The prepared runtime layer: the Python runtime (the venv with TensorFlow from the wheelhouse, the wheelhouse copy,
the lock) installed once per test run by the real python_runtime role on one fresh lab host, then stacked under the
hosts of every lab that needs prepared hosts (an overlay lower layer between the host's own upper dir and the rootfs).

    layer = runtime_layer(wheelhouse)              # cached under .cache/lab/layers/runtime-<digest>/
    Lab(..., layers=(layer,))                      # its hosts boot with the runtime in place

Each lab host installing TensorFlow from the wheelhouse again (the wheelhouse copied over SSH, a 600 MB wheel
unpacked, per host) is what the prepare of a lab spends its minutes on; the role's own probe then finds the runtime
in place on every host of such a lab and installs nothing. The layer is keyed by what the role would install (the
rootfs, the role, the locks, the wheelhouse's listing): a change to any of them builds a new one. The install path
build is itself the test of that install path: it runs the role on a fresh host, air-gapped, checks TensorFlow
imports and runs the role again, and keeps what it saw as the layer's build record (``build_record``), which
tests/lab/test_runtime_install.py asserts on (one fresh install per test run, not two).
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
from typing import TYPE_CHECKING

from lab.config import LabError
from lab.paths import LabPaths, default_lab_dir
from lab.rootfs import STAMP as ROOTFS_STAMP
from tfcluster.core.contract import WORKER
from tfcluster.core.files import tree_digest
from tfcluster.core.paths import COLLECTION, REPO_ROOT, ROLES

if TYPE_CHECKING:
    from lab.lab import Lab

log = logging.getLogger(__name__)

FORMAT = 2  # bump when what is kept or dropped below changes
LAYER_STAMP = ".tfcluster-layer.json"  # written last: the layer is whole
BUILD_RECORD = ".tfcluster-layer-build.json"  # what the build saw (build_record)
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
    """What the layer holds and how it was built, as a digest: the rootfs's stamp, the role and its locks, the
    modules it runs (the collection's plugins), the build's playbook, the wheelhouse's listing."""
    wheels = sorted((p.name, p.stat().st_size) for p in wheelhouse.glob("*.whl"))
    stamp = (rootfs / ROOTFS_STAMP).read_text() if (rootfs / ROOTFS_STAMP).is_file() else ""
    material = {"format": FORMAT, "rootfs": stamp, "role": tree_digest(ROLE),
                "plugins": tree_digest(COLLECTION / "plugins"),
                "playbook": hashlib.sha256(PLAYBOOK.read_bytes()).hexdigest(), "wheels": wheels}
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
    from lab.flows import ANSIBLE_PLAYBOOK, INVENTORY, VENV_BIN, recap
    from lab.lab import Lab

    lab = Lab(slots=(WORKER,), name=LAYER_LAB, names=(LAYER_HOST,), lab_dir=paths.root)
    try:
        lab.start()
        env = {**os.environ, **lab.inventory_env(), "ANSIBLE_CONFIG": str(REPO_ROOT / "ansible.cfg"),
               "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '')}", "ANSIBLE_NOCOLOR": "true"}
        argv = [str(ANSIBLE_PLAYBOOK), "-i", str(INVENTORY), str(PLAYBOOK),
                "-e", json.dumps({"python_runtime_wheelhouse": str(wheelhouse)})]

        def install() -> subprocess.CompletedProcess[str]:
            proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, check=False)
            if proc.returncode != 0:
                raise LabError(f"building the runtime layer: {' '.join(argv)} exited {proc.returncode}:\n"
                               + proc.stdout[-4000:] + proc.stderr[-2000:])
            return proc

        first = install()
        record = {"first": {"recap": recap(first.stdout).get(LAYER_HOST), "output": first.stdout},
                  **_observe(lab), "again": {"recap": recap(install().stdout).get(LAYER_HOST)}}
        lab.stop_host(LAYER_HOST)  # a clean power-off: every file of the install on disk
        keep(lab.paths.host_dir(LAYER_HOST) / "upper", layer, record)
    finally:
        lab.down()


def _observe(lab: Lab) -> dict[str, object]:
    """What the fresh host holds after the install: no route off the bridge (air-gapped), the TensorFlow wheels
    the wheelhouse copy holds, the version the venv imports."""
    tf = lab.ssh(LAYER_HOST, "TF_CPP_MIN_LOG_LEVEL=3 /opt/tfcluster/venv/bin/python -c "
                             "'import tensorflow as tf, tf_keras; print(tf.__version__)'", check=False, timeout=300)
    return {
        "route_off_bridge": lab.ssh(LAYER_HOST, "ip route get 192.0.2.1", check=False).returncode == 0,
        "tensorflow_wheels": lab.ssh(LAYER_HOST, "ls /opt/tfcluster/wheelhouse | grep -c '^tensorflow-'",
                                     check=False).stdout.strip(),
        "imports": tf.stdout.strip() if tf.returncode == 0 else f"exit {tf.returncode}: {tf.stderr[-2000:]}",
    }


def build_record(layer: Path) -> dict[str, object]:
    """What the layer's build saw (``_build``): the role's first run on the fresh host (recap, output), the host
    after it, and the second run's recap."""
    return json.loads((layer / BUILD_RECORD).read_text())


def keep(upper: Path, layer: Path, record: dict[str, object]) -> None:
    """The build host's upper dir, less what is the host's own (HOST_OWN), as ``layer``, with the build's record
    (its stamp written last)."""
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
    (tmp / BUILD_RECORD).write_text(json.dumps(record) + "\n")
    (tmp / LAYER_STAMP).write_text(json.dumps({"built_at": time.time()}) + "\n")
    tmp.rename(layer)
