"""A lab of real hosts: systemd-nspawn containers booted from a cached Debian rootfs on a private bridge.

    with Lab(slots=("chief", "worker", "worker")) as lab:     # builds/caches the rootfs, boots, waits for SSH
        lab.ssh("worker-0", "systemctl is-system-running")
        lab.cut("worker-1"); lab.restore("worker-1"); lab.reboot("worker-1")
        lab.hosts_file                                         # on-prem host file for the inventory's static source

Each host: an overlay over the rootfs, its own machine-id, host key, hostname, static /etc/hosts of every peer
and a static address on host0. Each systemd-nspawn runs under a tiny sh supervisor in its own cgroup
(``/sys/fs/cgroup/{systemd,unified}/tfcluster-lab/LAB/HOST``) that boots it again after an in-guest reboot
(exit 133). ``down()`` stops everything it finds for the lab, from the state on disk *and* from the cgroups,
mounts and links themselves, so it also cleans up after a crashed run, and is safe to call again.
"""

from __future__ import annotations

import fcntl
import logging
import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from lab import system
from lab.config import (
    DEFAULT_LAB,
    DEFAULT_PORT,
    LabError,
    LabHost,
    LabSpec,
    bridge_name,
    check_name,
    check_subnet,
    make_spec,
    pick_subnet,
    render_etc_hosts,
    render_hosts_file,
    render_known_hosts,
    render_network,
    render_ssh_config,
)
from lab.rootfs import ensure_rootfs, is_current

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[1]
BOOT_TIMEOUT = 90.0  # seconds for a host to reach running/degraded and answer SSH (2 busy cores)
STOP_TIMEOUT = 30.0  # seconds for a clean poweroff before the host's processes are killed
EXIT_REBOOT = 133  # systemd-nspawn's exit status when the guest rebooted

# The supervisor: joins the host's cgroups, runs systemd-nspawn, boots it again after an in-guest reboot, and on
# SIGTERM passes SIGTERM to systemd-nspawn (a clean poweroff of the guest) and waits for it.
SUPERVISOR = r"""
set -u
for cg in $TFCLAB_CGROUPS; do echo $$ > "$cg/cgroup.procs" || exit 90; done
stop=0
child=
trap 'stop=1; [ -n "$child" ] && kill -TERM "$child" 2>/dev/null' TERM INT HUP
while :; do
  "$@" &
  child=$!
  echo "$child" > "$TFCLAB_PIDFILE"
  [ "$stop" = 1 ] && kill -TERM "$child" 2>/dev/null
  rc=0; wait "$child" || rc=$?
  while kill -0 "$child" 2>/dev/null; do rc=0; wait "$child" || rc=$?; done
  echo "$(date +%s) nspawn exited $rc" >> "$TFCLAB_BOOTLOG"
  [ "$stop" = 1 ] && exit 0
  [ "$rc" = 133 ] || exit "$rc"
done
"""


def default_lab_dir() -> Path:
    return Path(os.environ.get("TFCLUSTER_LAB_DIR", REPO / ".cache" / "lab"))


@dataclass(frozen=True)
class LabPaths:
    """Where everything lives: the cached rootfs and key pair are shared; ``run/LAB/`` is one lab's state."""

    root: Path
    lab: str

    @property
    def rootfs(self) -> Path:
        return self.root / "rootfs"

    @property
    def private_key(self) -> Path:
        return self.root / "ssh" / "id_ed25519"

    @property
    def run(self) -> Path:
        return self.root / "run" / self.lab

    @property
    def spec(self) -> Path:
        return self.run / "spec.json"

    @property
    def hosts_file(self) -> Path:
        return self.run / "hosts.yml"

    @property
    def ssh_config(self) -> Path:
        return self.run / "ssh_config"

    @property
    def known_hosts(self) -> Path:
        return self.run / "known_hosts"

    def host_dir(self, host: str) -> Path:
        return self.run / "hosts" / host

    def merged(self, host: str) -> Path:
        return self.host_dir(host) / "merged"

    def log(self, host: str) -> Path:
        return self.run / "logs" / f"{host}.log"

    def pidfile(self, host: str) -> Path:
        return self.run / "logs" / f"{host}.nspawn.pid"

    def bootlog(self, host: str) -> Path:
        return self.run / "logs" / f"{host}.boots"


@contextmanager
def _locked(root: Path) -> Iterator[None]:
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
    with _locked(paths.root):
        if (rebuild or not is_current(paths.rootfs)) and running_labs(paths.root):
            raise LabError(f"the rootfs must be (re)built but labs use it ({', '.join(running_labs(paths.root))}); "
                           "`python -m lab down --all` first")
        ensure_rootfs(paths.rootfs, mirror=mirror, rebuild=rebuild)
        ensure_keypair(paths.private_key)
    return paths.rootfs


def ensure_keypair(private_key: Path) -> None:
    if private_key.exists() and private_key.with_suffix(".pub").exists():
        return
    private_key.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    for p in (private_key, private_key.with_suffix(".pub")):
        p.unlink(missing_ok=True)
    system.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "tfcluster-lab", "-f", str(private_key)])


def running_labs(root: Path) -> list[str]:
    """Labs with state on disk or processes in their cgroups."""
    names = {p.name for p in (root / "run").glob("*") if p.is_dir()}
    for base in system.cgroup_bases():
        top = base / system.CGROUP_TOP
        if top.is_dir():
            names.update(p.name for p in top.iterdir() if p.is_dir())
    return sorted(names)


class Lab:
    """N hosts on a bridge. ``start()``/``down()`` or use it as a context manager; ``Lab.attach(name)`` for a
    lab that another process (``python -m lab up``) started."""

    def __init__(self, slots: Sequence[str] = ("chief", "worker", "worker"), *, name: str = DEFAULT_LAB,
                 names: Sequence[str] | None = None, subnet: str | None = None, port: int = DEFAULT_PORT,
                 bind_ro: Sequence[str] = (), lab_dir: Path | None = None, boot_timeout: float = BOOT_TIMEOUT) -> None:
        self.paths = LabPaths(lab_dir or default_lab_dir(), check_name(name, "lab name"))
        self._slots = tuple(slots)
        self._names = tuple(names) if names is not None else None
        self._subnet = subnet
        self._port = port
        self._bind_ro = tuple(bind_ro)
        self.boot_timeout = boot_timeout
        self.spec: LabSpec | None = None
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self.boot_seconds: float | None = None

    # ---- lifecycle -------------------------------------------------------------------------------------------

    @classmethod
    def attach(cls, name: str = DEFAULT_LAB, lab_dir: Path | None = None) -> Lab:
        lab = cls(name=name, lab_dir=lab_dir)
        try:
            lab.spec = LabSpec.from_json(lab.paths.spec.read_text())
        except FileNotFoundError:
            raise LabError(f"lab {name!r} is not up (no {lab.paths.spec}); start it with "
                           f"`python -m lab up --name {name}`") from None
        return lab

    def __enter__(self) -> Lab:
        try:
            self.start()
        except BaseException:
            self.down()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    def start(self) -> Lab:
        """Boot every host and wait until each runs systemd and answers SSH. On failure the caller must down()."""
        setup(self.paths.root)
        with _locked(self.paths.root):
            if self.paths.run.exists() or any(g.is_dir() for g in system.lab_cgroups(self.paths.lab)):
                log.info("lab %s has state left from an earlier run; cleaning it up first", self.paths.lab)
                self._down_locked()
            used = system.used_networks()
            subnet = check_subnet(self._subnet, len(self._slots), used) if self._subnet else pick_subnet(used)
            spec = make_spec(self.paths.lab, self._slots, subnet, port=self._port, names=self._names,
                             bind_ro=self._bind_ro)
            self._check_free(spec)
            self.spec = spec
            self.paths.run.mkdir(parents=True)
            (self.paths.run / "logs").mkdir()
            self.paths.spec.write_text(spec.to_json())
            started = time.monotonic()
            system.create_bridge(spec.bridge, f"{spec.control_address}/{spec.network.prefixlen}")
            keys = [(h, self._prepare_host(h)) for h in spec.hosts]
            self.paths.known_hosts.write_text(render_known_hosts(keys))
            key = str(self.paths.private_key)
            self.paths.ssh_config.write_text(render_ssh_config(spec, key, str(self.paths.known_hosts)))
            self.paths.hosts_file.write_text(render_hosts_file(spec, key))
            for host in spec.hosts:
                self._boot(host)
        self.wait_ready([h.name for h in spec.hosts])
        self.boot_seconds = time.monotonic() - started
        log.info("lab %s: %d hosts up in %.1f s on %s (%s)", spec.name, len(spec.hosts), self.boot_seconds,
                 spec.bridge, spec.subnet)
        return self

    def down(self) -> None:
        """Stop every host, unmount, remove cgroups, the bridge and the lab's state. Safe to call again."""
        with _locked(self.paths.root):
            self._down_locked()

    def _down_locked(self) -> None:
        spec = self.spec
        if spec is None and self.paths.spec.exists():
            try:
                spec = LabSpec.from_json(self.paths.spec.read_text())
            except (OSError, ValueError, KeyError, TypeError):
                spec = None
        hosts = set(spec_host.name for spec_host in spec.hosts) if spec else set()
        for group in system.lab_cgroups(self.paths.lab):
            if group.is_dir():
                hosts.update(p.name for p in group.iterdir() if p.is_dir())
        hosts_dir = self.paths.run / "hosts"
        if hosts_dir.is_dir():
            hosts.update(p.name for p in hosts_dir.iterdir())
        errors: list[str] = []
        for host in sorted(hosts):  # every host powers off at once; then each is waited for
            self._signal_host(host)
        for host in sorted(hosts):
            try:
                self._stop_host(host)
            except LabError as exc:
                errors.append(str(exc))
        for group in system.lab_cgroups(self.paths.lab):
            try:
                system.remove_cgroup(group)
            except (LabError, OSError) as exc:
                errors.append(str(exc))
        for base in system.cgroup_bases():  # the shared top, once no lab uses it
            with suppress(OSError):
                (base / system.CGROUP_TOP).rmdir()
        try:
            system.delete_link(bridge_name(self.paths.lab))
            system.unmount_all(self.paths.run)
            system.remove_tree(self.paths.run)
        except (LabError, OSError) as exc:
            errors.append(str(exc))
        self._procs.clear()
        if errors:
            raise LabError(f"lab {self.paths.lab}: teardown left something behind:\n" + "\n".join(errors))
        log.info("lab %s is down", self.paths.lab)

    # ---- per host --------------------------------------------------------------------------------------------

    def _check_free(self, spec: LabSpec) -> None:
        if system.link_exists(spec.bridge):
            raise LabError(f"bridge {spec.bridge} already exists; `python -m lab down --name {spec.name}`")
        for host in spec.hosts:
            if system.link_exists(host.veth):
                raise LabError(f"host name {host.name!r} is in use by another lab (link {host.veth} exists); "
                               "down that lab or give this one other host names")

    def _prepare_host(self, host: LabHost) -> str:
        """Overlay + identity files; returns the host's public SSH host key."""
        assert self.spec is not None
        d = self.paths.host_dir(host.name)
        merged = self.paths.merged(host.name)
        system.mount_overlay(self.paths.rootfs, d / "upper", d / "work", merged)
        etc = merged / "etc"
        (etc / "machine-id").write_text(uuid.uuid4().hex + "\n")
        (etc / "hostname").write_text(host.name + "\n")
        (etc / "hosts").write_text(render_etc_hosts(self.spec))
        (etc / "systemd/network").mkdir(parents=True, exist_ok=True)
        (etc / "systemd/network/10-lab-host0.network").write_text(render_network(host, self.spec))
        key = etc / "ssh/ssh_host_ed25519_key"
        system.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"root@{host.name}", "-f", str(key)])
        ssh_dir = merged / "root/.ssh"
        ssh_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        auth = ssh_dir / "authorized_keys"
        auth.write_text(self.paths.private_key.with_suffix(".pub").read_text())
        auth.chmod(0o600)
        return key.with_suffix(".pub").read_text().strip()

    def _nspawn_argv(self, host: LabHost) -> list[str]:
        assert self.spec is not None
        argv = ["systemd-nspawn", "--quiet", "--boot", "--register=no", "--keep-unit",
                f"--network-bridge={self.spec.bridge}", "--resolv-conf=delete", "--link-journal=no",
                "--console=read-only", "-D", str(self.paths.merged(host.name)), "-M", host.name]
        argv += [f"--bind-ro={path}" for path in self.spec.bind_ro]
        return argv

    def _boot(self, host: LabHost) -> None:
        groups = system.lab_cgroups(self.paths.lab, host.name)
        for g in groups:
            g.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "TFCLAB_CGROUPS": " ".join(map(str, groups)),
               "TFCLAB_PIDFILE": str(self.paths.pidfile(host.name)),
               "TFCLAB_BOOTLOG": str(self.paths.bootlog(host.name))}
        with open(self.paths.log(host.name), "ab") as out:
            self._procs[host.name] = subprocess.Popen(
                ["/bin/sh", "-c", SUPERVISOR, f"tfclab-{self.paths.lab}-{host.name}", *self._nspawn_argv(host)],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def _signal_host(self, host: str) -> None:
        """SIGTERM the host's supervisor (it passes it to systemd-nspawn: a clean poweroff of the guest)."""
        groups = system.lab_cgroups(self.paths.lab, host)
        # The sh supervisor sits at the top of the host's cgroup; systemd-nspawn moves itself into supervisor/
        # and the guest into payload/.
        targets = system.live(set().union(*(system.cgroup_pids(g, recursive=False) for g in groups)))
        if not targets:  # the supervisor died: signal systemd-nspawn itself
            targets = system.live(set().union(*(system.cgroup_pids(g / "supervisor") for g in groups)))
        system.signal_pids(targets, signal.SIGTERM)

    def _stop_host(self, host: str) -> None:
        """Wait for the host to power off (kill what is left after STOP_TIMEOUT), then remove its cgroup+mount."""
        groups = system.lab_cgroups(self.paths.lab, host)

        def pids() -> set[int]:
            return set().union(*(system.cgroup_pids(g) for g in groups))

        if not system.wait_gone(pids, STOP_TIMEOUT):
            log.warning("host %s did not power off within %.0f s; killing its processes", host, STOP_TIMEOUT)
            for _ in range(50):
                left = system.live(pids())
                if not left:
                    break
                system.signal_pids(left, signal.SIGKILL)
                time.sleep(0.1)
        proc = self._procs.pop(host, None)
        if proc is not None:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        left = system.live(pids())
        if left:
            raise LabError(f"host {host}: processes {sorted(left)} survived SIGKILL")
        for g in groups:
            system.remove_cgroup(g)
        system.unmount_all(self.paths.host_dir(host))

    # ---- readiness -------------------------------------------------------------------------------------------

    def wait_ready(self, names: Sequence[str], timeout: float | None = None) -> None:
        """Wait until each host's systemd is running (or degraded) and SSH answers; raise naming the laggards."""
        timeout = timeout or self.boot_timeout
        with ThreadPoolExecutor(max_workers=max(1, len(names))) as pool:
            results = list(pool.map(lambda n: self._wait_one(n, timeout), names))
        failed = [msg for msg in results if msg]
        if failed:
            raise LabError("hosts did not come up:\n" + "\n".join(failed))

    def _wait_one(self, name: str, timeout: float) -> str | None:
        host = self.host(name)
        deadline = time.monotonic() + timeout
        state = "no SSH"
        while time.monotonic() < deadline:
            if not self._supervisor_alive(name):
                return f"{name}: systemd-nspawn exited; last log lines:\n{self.log_tail(name)}"
            if _port_open(host.address, 22):
                proc = self.ssh(name, "systemctl is-system-running --wait", check=False,
                                timeout=max(1.0, deadline - time.monotonic()))
                state = proc.stdout.strip() or f"ssh exit {proc.returncode}: {proc.stderr.strip()}"
                if state in ("running", "degraded"):
                    if state == "degraded":
                        failed = self.ssh(name, "systemctl --failed --no-legend --plain", check=False).stdout
                        log.warning("host %s is degraded; failed units:\n%s", name, failed)
                    return None
            time.sleep(0.1)
        return f"{name}: not ready after {timeout:.0f} s (last state: {state}); log:\n{self.log_tail(name)}"

    def _supervisor_alive(self, name: str) -> bool:
        proc = self._procs.get(name)
        if proc is not None:
            return proc.poll() is None
        return bool(system.live(set().union(*(system.cgroup_pids(g) for g in system.lab_cgroups(
            self.paths.lab, name)))))

    def log_tail(self, name: str, lines: int = 30) -> str:
        try:
            text = self.paths.log(name).read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    # ---- what tests use --------------------------------------------------------------------------------------

    @property
    def hosts(self) -> tuple[LabHost, ...]:
        return self._spec().hosts

    def host(self, name: str) -> LabHost:
        return self._spec().host(name)

    def hosts_of(self, task_type: str) -> tuple[LabHost, ...]:
        return tuple(h for h in self.hosts if h.task_type == task_type)

    @property
    def hosts_file(self) -> Path:
        return self.paths.hosts_file

    @property
    def ssh_config(self) -> Path:
        return self.paths.ssh_config

    @property
    def private_key(self) -> Path:
        return self.paths.private_key

    @property
    def known_hosts(self) -> Path:
        return self.paths.known_hosts

    @property
    def control_address(self) -> str:
        return self._spec().control_address

    def inventory_env(self) -> dict[str, str]:
        """Environment for `make ... CLUSTER=onprem` / ansible against this lab: the inventory's static source
        reads the host file; Ansible takes the key from ANSIBLE_PRIVATE_KEY_FILE."""
        return {"TFCLUSTER_SOURCE": "static", "TFCLUSTER_HOSTS_FILE": str(self.hosts_file),
                "ANSIBLE_PRIVATE_KEY_FILE": str(self.private_key)}

    def ssh_argv(self, name: str, command: str | None = None) -> list[str]:
        self.host(name)
        argv = ["ssh", "-F", str(self.ssh_config), name]
        return argv + ([command] if command is not None else [])

    def ssh(self, name: str, command: str, check: bool = True, timeout: float | None = 60,
            input: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run a shell command on a host as root; raise LabError on a non-zero exit when ``check``."""
        argv = self.ssh_argv(name, command)
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, input=input,
                                  stdin=None if input is not None else subprocess.DEVNULL, check=False)
        except subprocess.TimeoutExpired as exc:
            if check:
                raise LabError(f"{name}: `{command}` did not finish within {timeout} s") from exc
            return subprocess.CompletedProcess(argv, 124, stdout="", stderr=f"timed out after {timeout} s")
        if check and proc.returncode != 0:
            raise LabError(f"{name}: `{command}` exited {proc.returncode}: {(proc.stderr or proc.stdout).strip()}")
        return proc

    def copy_to(self, name: str, src: Path, dest: str) -> None:
        self.host(name)
        system.run(["scp", "-q", "-r", "-F", str(self.ssh_config), str(src), f"{name}:{dest}"], timeout=600)

    def reachable(self, name: str, timeout: float = 1.0) -> bool:
        """Does the host's SSH port accept a TCP connection from the control machine?"""
        return _port_open(self.host(name).address, 22, timeout)

    def cut(self, name: str) -> None:
        """Pull the host's cable: its end of the bridge goes down, its own address and state stay."""
        system.set_link(self.host(name).veth, up=False)

    def restore(self, name: str) -> None:
        system.set_link(self.host(name).veth, up=True)

    def is_cut(self, name: str) -> bool:
        return not system.link_is_up(self.host(name).veth)

    def nspawn_pid(self, name: str) -> int | None:
        try:
            return int(self.paths.pidfile(name).read_text().strip())
        except (OSError, ValueError):
            return None

    def boots(self, name: str) -> int:
        """How many times the host's systemd-nspawn has exited so far (each in-guest reboot adds one)."""
        try:
            return len(self.paths.bootlog(name).read_text().splitlines())
        except OSError:
            return 0

    def reboot(self, name: str, wait: bool = True, timeout: float | None = None) -> None:
        """``systemctl reboot`` in the host; systemd-nspawn exits 133 and the supervisor boots it again."""
        before = self.boots(name)
        self.ssh(name, "systemctl reboot --no-block", check=False, timeout=15)
        if wait:
            deadline = time.monotonic() + (timeout or self.boot_timeout)
            _wait_for(lambda: self.boots(name) > before, deadline, f"{name} did not go down for the reboot")
            self.wait_ready([name], timeout=max(1.0, deadline - time.monotonic()))

    def memory_kib(self, name: str) -> int:
        """PSS of every process of the host (guest and its systemd-nspawn), in KiB."""
        groups = system.lab_cgroups(self.paths.lab, name)
        return system.pss_kib(system.live(set().union(*(system.cgroup_pids(g) for g in groups))))

    def status(self) -> list[dict[str, object]]:
        rows = []
        for h in self.hosts:
            rows.append({"name": h.name, "address": h.address, "slot": f"{h.task_type}:{h.index}",
                         "running": self._supervisor_alive(h.name), "link": "down" if self.is_cut(h.name) else "up",
                         "ssh": self.reachable(h.name, 0.5), "memory_mib": round(self.memory_kib(h.name) / 1024, 1),
                         "boots": self.boots(h.name) + 1})
        return rows

    def _spec(self) -> LabSpec:
        if self.spec is None:
            raise LabError(f"lab {self.paths.lab} is not started")
        return self.spec


def _port_open(address: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return True
    except OSError:
        return False


def _wait_for(predicate: Callable[[], bool], deadline: float, message: str) -> None:
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise LabError(message)


def leftovers(lab_dir: Path | None = None, lab: str | None = None) -> list[str]:
    """Anything the lab(s) left on this machine: bridges, veths, mounts, cgroups, systemd-nspawn processes.

    Empty when teardown was clean. ``lab`` limits the check to one lab.
    """
    root = lab_dir or default_lab_dir()
    found: list[str] = []
    names = [lab] if lab else running_labs(root)
    for name in names:
        if system.link_exists(bridge_name(name)):
            found.append(f"bridge {bridge_name(name)}")
        for g in system.lab_cgroups(name):
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
