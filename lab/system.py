"""Thin wrappers over the outer machine: commands, packages, links, mounts, cgroups and processes."""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from lab.config import LabError

log = logging.getLogger(__name__)

CGROUP_FS = Path("/sys/fs/cgroup")
CGROUP_TOP = "tfcluster-lab"
# Outer-machine commands the lab needs, and the Debian package that brings each.
REQUIRED_COMMANDS: dict[str, str] = {
    "debootstrap": "debootstrap",
    "systemd-nspawn": "systemd-container",
    "ip": "iproute2",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
    "scp": "openssh-client",
    "mount": "mount",
    "nft": "nftables",  # the job firewall rules, loaded in a private namespace (tests/unit/playbooks/test_firewall.py)
}


def run(argv: Sequence[str], check: bool = True, timeout: float | None = None,
        input: str | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run a command (in ``cwd``), capture its output; raise LabError with the output when it fails and ``check``."""
    log.debug("run: %s", " ".join(argv))
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, input=input,
                              stdin=None if input is not None else subprocess.DEVNULL, check=False, cwd=cwd)
    except FileNotFoundError:
        raise LabError(f"{argv[0]} is not installed; run `python -m lab setup`") from None
    except subprocess.TimeoutExpired as exc:
        raise LabError(f"`{' '.join(argv)}` did not finish within {timeout} s") from exc
    if check and proc.returncode != 0:
        out = (proc.stderr or proc.stdout).strip()
        raise LabError(f"`{' '.join(argv)}` failed with exit code {proc.returncode}: {out}")
    return proc


def require_root() -> None:
    if os.geteuid() != 0:
        raise LabError("the lab needs root (it creates a bridge, mounts overlays and boots systemd-nspawn hosts)")


def missing_packages() -> list[str]:
    return sorted({pkg for cmd, pkg in REQUIRED_COMMANDS.items() if shutil.which(cmd) is None})


def ensure_packages() -> None:
    """apt-get install what the lab needs (``apt-get update`` first only when the install fails)."""
    missing = missing_packages()
    if not missing:
        return
    require_root()
    log.info("installing %s with apt-get", " ".join(missing))
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "--no-install-recommends", *missing]
    if subprocess.run(install, env=env, capture_output=True, check=False).returncode != 0:
        subprocess.run(["apt-get", "update"], env=env, capture_output=True, check=False)
        proc = subprocess.run(install, env=env, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise LabError(f"apt-get could not install {' '.join(missing)}: {proc.stderr.strip()[-2000:]}")


# Every booted host's systemd and journald take inotify instances from root's one per-user pool (no user namespace
# here); Debian's default of 128 runs out at about a dozen hosts booted at once (`Failed to create control group
# inotify object: Too many open files`), which a suite of parallel labs reaches. Raised, never lowered.
INOTIFY_FLOOR: dict[str, int] = {"max_user_instances": 1024, "max_user_watches": 524288}
INOTIFY_SYSCTL = Path("/proc/sys/fs/inotify")


def ensure_inotify(root: Path = INOTIFY_SYSCTL, floor: Mapping[str, int] = INOTIFY_FLOOR) -> dict[str, int]:
    """Raise the inotify limits under ``root`` to ``floor`` where they are lower; return the limits in force."""
    now: dict[str, int] = {}
    for name, least in floor.items():
        path = root / name
        value = int(path.read_text().strip())
        if value < least:
            try:
                path.write_text(f"{least}\n")
            except OSError as exc:
                raise LabError(f"fs.inotify.{name} is {value}; a lab needs {least} "
                               f"(sysctl -w fs.inotify.{name}={least}): {exc}") from exc
            value = least
        now[name] = value
    return now


# ---- network -------------------------------------------------------------------------------------------------

def used_networks() -> list[str]:
    """Every IPv4 address/route on this machine in CIDR form (to pick a lab subnet that collides with none)."""
    out: list[str] = []
    for entry in json.loads(run(["ip", "-j", "-4", "addr", "show"]).stdout or "[]"):
        for addr in entry.get("addr_info", []):
            out.append(f"{addr['local']}/{addr.get('prefixlen', 32)}")
    for route in json.loads(run(["ip", "-j", "-4", "route", "show", "table", "all"]).stdout or "[]"):
        dst = route.get("dst", "")
        if dst and dst != "default" and route.get("type", "unicast") in ("unicast", "local"):
            out.append(dst if "/" in dst else f"{dst}/32")
    return out


def link_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()


def link_is_up(name: str) -> bool:
    try:
        flags = int(Path("/sys/class/net", name, "flags").read_text(), 16)
    except OSError:
        return False
    return bool(flags & 0x1)  # IFF_UP


def create_bridge(name: str, address: str) -> None:
    # nf_call_iptables 0: bridged lab traffic skips the outer machine's iptables FORWARD chain (Docker sets DROP).
    run(["ip", "link", "add", name, "type", "bridge", "stp_state", "0", "forward_delay", "0",
         "nf_call_iptables", "0", "nf_call_ip6tables", "0", "nf_call_arptables", "0"])
    run(["ip", "addr", "add", address, "dev", name])
    run(["ip", "link", "set", name, "up"])


def delete_link(name: str) -> None:
    if link_exists(name):
        run(["ip", "link", "del", name])


def set_link(name: str, up: bool) -> None:
    if not link_exists(name):
        raise LabError(f"link {name} does not exist (is the host running?)")
    run(["ip", "link", "set", name, "up" if up else "down"])


# ---- mounts --------------------------------------------------------------------------------------------------

def _unescape(path: str) -> str:
    return path.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def mounts_under(root: Path) -> list[Path]:
    """Mount points at or below ``root`` in this mount namespace, deepest first."""
    prefix = str(root.resolve())
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = _unescape(line.split()[4])
        if point == prefix or point.startswith(prefix + "/"):
            found.append(Path(point))
    return sorted(set(found), key=lambda p: len(p.parts), reverse=True)


def mount_overlay(lower: Path | Sequence[Path], upper: Path, work: Path, merged: Path) -> None:
    """An overlay of ``upper`` over the lower layers (one path, or several: the first is on top)."""
    lowers = [lower] if isinstance(lower, Path) else list(lower)
    for d in (upper, work, merged):
        d.mkdir(parents=True, exist_ok=True)
    run(["mount", "-t", "overlay", "overlay", "-o",
         f"lowerdir={':'.join(str(p) for p in lowers)},upperdir={upper},workdir={work}", str(merged)])


def unmount_all(root: Path) -> None:
    for point in mounts_under(root):
        if run(["umount", str(point)], check=False).returncode != 0:
            run(["umount", "--lazy", str(point)])


def remove_tree(path: Path) -> None:
    """rm -rf, refusing while anything below is still mounted (never delete through a mount)."""
    if not path.exists():
        return
    left = mounts_under(path)
    if left:
        raise LabError(f"refusing to delete {path}: still mounted: {', '.join(map(str, left))}")
    shutil.rmtree(path)


# ---- cgroups and processes -----------------------------------------------------------------------------------

def cgroup_bases() -> list[Path]:
    """The cgroup hierarchies a host's processes are placed in: unified (v2) and, on hybrid v1, name=systemd."""
    if (CGROUP_FS / "cgroup.controllers").exists():  # pure cgroup v2
        return [CGROUP_FS]
    bases = [CGROUP_FS / name for name in ("systemd", "unified") if (CGROUP_FS / name / "cgroup.procs").exists()]
    if not bases:
        raise LabError(f"no name=systemd or unified cgroup hierarchy under {CGROUP_FS}; systemd-nspawn needs one")
    return bases


def lab_cgroups(lab: str, host: str | None = None) -> list[Path]:
    parts = [CGROUP_TOP, lab] + ([host] if host else [])
    return [base.joinpath(*parts) for base in cgroup_bases()]


def cgroup_tree(group: Path) -> list[Path]:
    """``group`` and every cgroup below it, parents first; cgroups that vanish during the walk are skipped
    (a guest's systemd removes its own while it shuts down)."""
    found = []
    for dirpath, _dirs, _files in os.walk(group, onerror=lambda _err: None):
        found.append(Path(dirpath))
    return found


def cgroup_pids(group: Path, recursive: bool = True) -> set[int]:
    pids: set[int] = set()
    if not group.is_dir():
        return pids
    for g in cgroup_tree(group) if recursive else [group]:
        try:
            pids.update(int(x) for x in (g / "cgroup.procs").read_text().split())
        except OSError:
            continue
    return pids


def live(pids: Iterable[int]) -> set[int]:
    """The pids that still run (zombies count as gone)."""
    alive = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in ("Z", "X"):
            alive.add(pid)
    return alive


def signal_pids(pids: Iterable[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def wait_gone(pids_of: Callable[[], set[int]], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not live(pids_of()):
            return True
        time.sleep(0.1)
    return not live(pids_of())


def remove_cgroup(group: Path) -> None:
    """rmdir a cgroup and its children, deepest first (systemd-nspawn makes payload/ and supervisor/ inside)."""
    for child in reversed(cgroup_tree(group)):
        _rmdir(child)


# ---- the cpu controller: a lab's CPU limit and weight --------------------------------------------------------
# Each host is one group of the hierarchy that has the cpu controller, inside its lab's: cgroup v1's
# ``cpu/tfcluster-lab/LAB/HOST`` (a hybrid machine such as this one: the host's supervisor joins it, and a guest sees
# that hierarchy read-only, so every process of the host stays in it) or, on pure cgroup v2, the host's own group
# ``tfcluster-lab/LAB/HOST`` with ``cpu`` enabled above it. Without either, a lab has no CPU settings (LabError).
# A group competes with its siblings as one process would (v1 cpu.shares, v2 cpu.weight), whatever it holds: the
# labs' top group weighs as much as CPU_TOP_PROCESSES busy processes of the control machine, so labs together are
# not squeezed into one process's share (their hosts' processes competed one by one before they had a group).
CPU_PERIOD_US = 100_000
CPU_DEFAULT_WEIGHT = 100  # cgroup v2's cpu.weight default; v1's cpu.shares is weight * 1024 / 100
CPU_TOP_PROCESSES = 8


def cpu_v1(base: Path = CGROUP_FS) -> bool:
    return (base / "cpu" / "cpu.cfs_quota_us").exists()


def cpu_top(base: Path = CGROUP_FS) -> Path | None:
    """The labs' top group under the cpu controller, None where the machine has none."""
    if cpu_v1(base):
        return base / "cpu" / CGROUP_TOP
    with contextlib.suppress(OSError):
        if "cpu" in (base / "cgroup.controllers").read_text().split():
            return base / CGROUP_TOP
    return None


def cpu_group(lab: str, host: str | None = None, base: Path = CGROUP_FS) -> Path | None:
    """The lab's (or one host's) group under the cpu controller, None where the machine has none."""
    top = cpu_top(base)
    return None if top is None else top.joinpath(lab, *([host] if host else []))


def _weigh(group: Path, weight: int, v1: bool) -> None:
    if v1:
        (group / "cpu.shares").write_text(f"{max(2, weight * 1024 // CPU_DEFAULT_WEIGHT)}\n")
    else:
        (group / "cpu.weight").write_text(f"{weight}\n")


def cpu_join_groups(lab: str, host: str, base: Path = CGROUP_FS) -> list[Path]:
    """The cpu group a host's supervisor joins besides its own, created here (v1 only: on v2 the host's own group
    is the one)."""
    group = cpu_group(lab, host, base)
    if group is None or not cpu_v1(base):
        return []
    top = group.parent.parent
    if not top.is_dir():
        top.mkdir(parents=True, exist_ok=True)
        _weigh(top, CPU_TOP_PROCESSES * CPU_DEFAULT_WEIGHT, v1=True)
    group.mkdir(parents=True, exist_ok=True)
    return [group]


def _cpu_ready(lab: str, host: str | None, base: Path) -> Path:
    group = cpu_group(lab, host, base)
    if group is None:
        raise LabError("this machine has no cgroup cpu controller (neither cgroup v1's cpu hierarchy nor 'cpu' in "
                       f"{base / 'cgroup.controllers'}), so a lab's CPU cannot be limited or weighed")
    if not group.is_dir():
        raise LabError(f"lab {lab} has no cpu group {group}: is it up?")
    if not cpu_v1(base):  # v2: each parent enables the controller for its children
        parent = base
        for part in group.relative_to(base).parts:
            control = parent / "cgroup.subtree_control"
            if "cpu" not in control.read_text().split():
                control.write_text("+cpu\n")
                if parent.name == CGROUP_TOP:
                    _weigh(parent, CPU_TOP_PROCESSES * CPU_DEFAULT_WEIGHT, v1=False)
            parent = parent / part
    return group


def limit_cpu(lab: str, cores: float | None, host: str | None = None, base: Path = CGROUP_FS) -> None:
    """Every process of the lab (of ``host``) together gets at most ``cores`` CPUs (None: no limit)."""
    if cores is not None and cores <= 0:
        raise LabError(f"a CPU limit must be above 0 cores, not {cores}")
    group = _cpu_ready(lab, host, base)
    quota = None if cores is None else max(1000, round(cores * CPU_PERIOD_US))
    if cpu_v1(base):
        (group / "cpu.cfs_period_us").write_text(f"{CPU_PERIOD_US}\n")
        (group / "cpu.cfs_quota_us").write_text(f"{-1 if quota is None else quota}\n")
    else:
        (group / "cpu.max").write_text(f"{'max' if quota is None else quota} {CPU_PERIOD_US}\n")


def weigh_cpu(lab: str, weight: int, base: Path = CGROUP_FS) -> None:
    """The lab's share of a contended CPU against its siblings, as v2's cpu.weight (1-10000, default 100)."""
    if not 1 <= weight <= 10_000:
        raise LabError(f"a CPU weight is 1-10000 (cgroup v2's cpu.weight), not {weight}")
    _weigh(_cpu_ready(lab, None, base), weight, cpu_v1(base))


def remove_cpu_group(lab: str, base: Path = CGROUP_FS) -> None:
    """The lab's v1 cpu groups, once its hosts are gone, and the shared top once no lab uses it (v2: they are the
    hosts' own groups, which go with the others)."""
    if not cpu_v1(base):
        return
    group = base / "cpu" / CGROUP_TOP / lab
    if group.is_dir():
        remove_cgroup(group)
    with contextlib.suppress(OSError):
        group.parent.rmdir()


def _rmdir(path: Path) -> None:
    for _ in range(50):
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY:
                raise
            time.sleep(0.1)
    raise LabError(f"cgroup {path} is still busy (processes left: {sorted(cgroup_pids(path))})")


def pss_kib(pids: Iterable[int]) -> int:
    """Proportional set size of the processes, in KiB (shared pages split between their users)."""
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
                    break
        except OSError:
            continue
    return total


def chown(path: Path, uid: int, gid: int) -> None:
    """Give a file in a host's overlay to a user of that host (uid/gid as the host's /etc/passwd says)."""
    os.chown(path, uid, gid, follow_symlinks=False)


def add_address(link: str, address: str) -> None:
    run(["ip", "addr", "replace", address, "dev", link])


def del_address(link: str, address: str) -> None:
    if f"inet {address} " in run(["ip", "-4", "-o", "addr", "show", "dev", link]).stdout:
        run(["ip", "addr", "del", address, "dev", link])


def set_unreachable(network: str, on: bool) -> None:
    """An `unreachable` route for `network` (on), so nothing leaks out through the default route, or none (off)."""
    present = network in run(["ip", "-4", "route", "show", "type", "unreachable"]).stdout
    if on and not present:
        run(["ip", "route", "add", "unreachable", network])
    elif not on and present:
        run(["ip", "route", "del", "unreachable", network])
