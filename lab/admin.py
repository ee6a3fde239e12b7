"""Machine-wide lab administration: one lab operation at a time, the cached rootfs and key, which labs exist,
and what a lab left behind."""

from __future__ import annotations

import fcntl
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from lab import system
from lab.config import DEFAULT_LAB, LabError, bridge_name, front_bridge_name
from lab.debs import ensure_debs
from lab.paths import LabPaths, default_lab_dir
from lab.rootfs import ensure_rootfs, is_current

log = logging.getLogger(__name__)


@contextmanager
def locked(root: Path) -> Iterator[None]:
    """One lab operation at a time on this machine (up/down of two labs must not pick the same subnet)."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "lab.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def setup(lab_dir: Path | None = None, mirror: str | None = None, rebuild: bool = False) -> Path:
    """Install the outer machine's packages, build/cache the rootfs and the SSH key pair. Idempotent."""
    system.require_root()
    system.ensure_packages()
    paths = LabPaths(lab_dir or default_lab_dir(), DEFAULT_LAB)
    with locked(paths.root):
        users = labs_of(paths.root)
        if (rebuild or not is_current(paths.rootfs)) and users:
            raise LabError(f"the rootfs in {paths.root} must be (re)built but labs use it ({', '.join(users)}); "
                           f"`python -m lab --lab-dir {paths.root} down --all` first")
        ensure_rootfs(paths.rootfs, mirror=mirror, rebuild=rebuild)
        ensure_keypair(paths.private_key)
        try:  # what the slurm role installs on a lab host (no route out); only the Slurm lab needs them
            ensure_debs(paths.rootfs, paths.root / "debs")
        except LabError as exc:
            log.warning("the Slurm lab's .deb files were not fetched (tests/lab/test_slurm.py needs them): %s", exc)
    return paths.rootfs


def ensure_keypair(private_key: Path) -> None:
    if private_key.exists() and private_key.with_suffix(".pub").exists():
        return
    private_key.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    for p in (private_key, private_key.with_suffix(".pub")):
        p.unlink(missing_ok=True)
    system.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "tfcluster-lab", "-f", str(private_key)])


def labs_of(root: Path) -> list[str]:
    """The labs booted from this lab dir's rootfs: each has its state dir under ``root/run`` from ``up`` to ``down``.

    A lab of another checkout (its own lab dir) shares the machine's cgroups and bridges, not this rootfs, so it
    does not stop this one being rebuilt.
    """
    return sorted(p.name for p in (root / "run").glob("*") if p.is_dir())


def running_labs(root: Path) -> list[str]:
    """Labs with state on disk or processes in their cgroups (any lab dir's, on this machine)."""
    names = set(labs_of(root))
    cpu_top = system.cpu_top()
    for top in [base / system.CGROUP_TOP for base in system.cgroup_bases()] + ([cpu_top] if cpu_top else []):
        if top.is_dir():
            names.update(p.name for p in top.iterdir() if p.is_dir())
    return sorted(names)


def leftovers(lab_dir: Path | None = None, lab: str | None = None) -> list[str]:
    """Anything the lab(s) left on this machine: bridges, veths, mounts, cgroups, systemd-nspawn processes.

    Empty when teardown was clean. ``lab`` limits the check to one lab.
    """
    root = lab_dir or default_lab_dir()
    found: list[str] = []
    names = [lab] if lab else running_labs(root)
    for name in names:
        for bridge in (bridge_name(name), front_bridge_name(name)):
            if system.link_exists(bridge):
                found.append(f"bridge {bridge}")
        cpu = system.cpu_group(name)
        for g in [*system.lab_cgroups(name), *([cpu] if cpu is not None else [])]:
            if g.exists():
                found.append(f"cgroup {g}")
        if (root / "run" / name).exists():
            found.append(f"state dir {root / 'run' / name}")
    # With ``lab`` only that lab's mounts and processes count: another lab may be up at the same time.
    scope = root / "run" / lab if lab else root
    found += [f"mount {m}" for m in system.mounts_under(root / "run")
              if m == scope or scope in m.parents] if (root / "run").exists() else []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"systemd-nspawn") and f"{scope}/".encode() in b" ".join(argv) + b"/":
            found.append(f"process {proc.name}: {b' '.join(argv).decode(errors='replace')}")
    return found
