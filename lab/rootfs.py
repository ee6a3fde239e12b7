"""Build and cache the lab's Debian 12 rootfs (debootstrap minbase), shared read-only by every host's overlay."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

from lab.config import LabError
from lab.render import SSHD_CONFIG
from lab.system import remove_tree, run

log = logging.getLogger(__name__)

SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
FORMAT = 1  # bump when the post-processing below changes: a cached rootfs with another stamp is rebuilt
# systemd + sshd + Python for Ansible targets (python3-apt for the apt module, python3-venv for the runtime's venv),
# and the small tools the playbooks and tests use on a host.
PACKAGES: tuple[str, ...] = (
    "systemd", "systemd-sysv", "dbus", "openssh-server", "python3", "python3-venv", "python3-apt",
    "iproute2", "iputils-ping", "sudo", "procps", "rsync", "pciutils", "ca-certificates", "nftables",
)
STAMP = ".tfcluster-lab-rootfs.json"
# Timers that would try to reach the network or churn the disk during tests.
MASKED_UNITS: tuple[str, ...] = ("apt-daily.timer", "apt-daily-upgrade.timer", "e2scrub_all.timer",
                                 "fstrim.timer", "e2scrub_reap.service")


def stamp_for(packages: tuple[str, ...] = PACKAGES, suite: str = SUITE) -> dict[str, object]:
    return {"format": FORMAT, "suite": suite, "packages": sorted(packages)}


def is_current(rootfs: Path) -> bool:
    try:
        return json.loads((rootfs / STAMP).read_text()) == stamp_for()
    except (OSError, ValueError):
        return False


def ensure_rootfs(rootfs: Path, mirror: str | None = None, rebuild: bool = False) -> bool:
    """Build ``rootfs`` unless a current one is cached; True when it was built now."""
    if is_current(rootfs) and not rebuild:
        return False
    mirror = mirror or os.environ.get("TFCLUSTER_LAB_MIRROR", DEFAULT_MIRROR)
    tmp = rootfs.with_name(rootfs.name + ".tmp")
    remove_tree(tmp)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    log.info("building the lab rootfs (debootstrap %s minbase from %s) into %s", SUITE, mirror, rootfs)
    started = time.monotonic()
    proc = run(["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", SUITE, str(tmp), mirror],
               check=False, timeout=1800)
    if proc.returncode != 0:
        log_file = tmp / "debootstrap" / "debootstrap.log"
        detail = log_file.read_text()[-3000:] if log_file.exists() else (proc.stderr or proc.stdout)[-3000:]
        raise LabError(f"debootstrap failed (exit {proc.returncode}); set TFCLUSTER_LAB_MIRROR to a reachable "
                       f"Debian mirror if {mirror} is not. Output:\n{detail}")
    finish(tmp)
    old = rootfs.with_name(rootfs.name + ".old")
    remove_tree(old)
    if rootfs.exists():
        rootfs.rename(old)
    tmp.rename(rootfs)
    remove_tree(old)
    log.info("lab rootfs ready in %.0f s", time.monotonic() - started)
    return True


def finish(root: Path) -> None:
    """Make a fresh debootstrap tree a base image: no caches, host keys or machine identity; networkd on."""
    for pattern in ("var/cache/apt/*.bin", "var/cache/apt/archives/*.deb", "var/lib/apt/lists/*",
                    "etc/ssh/ssh_host_*", "var/log/*.log", "var/log/apt/*"):
        for path in root.glob(pattern):
            if path.is_file() or path.is_symlink():
                path.unlink()
    (root / "etc/machine-id").write_text("")  # empty: each host gets its own, written by the lab
    dbus_id = root / "var/lib/dbus/machine-id"
    if dbus_id.exists() or dbus_id.is_symlink():
        dbus_id.unlink()
    dbus_id.parent.mkdir(parents=True, exist_ok=True)
    dbus_id.symlink_to("/etc/machine-id")
    run(["systemctl", f"--root={root}", "enable", "systemd-networkd.service"])
    run(["systemctl", f"--root={root}", "mask", *MASKED_UNITS])
    (root / "etc/ssh/sshd_config.d").mkdir(parents=True, exist_ok=True)
    (root / "etc/ssh/sshd_config.d/tfcluster-lab.conf").write_text(SSHD_CONFIG)
    (root / "root/.ssh").mkdir(mode=0o700, parents=True, exist_ok=True)
    (root / STAMP).write_text(json.dumps(stamp_for(), sort_keys=True) + "\n")
