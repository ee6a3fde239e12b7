"""A lab of real hosts: systemd-nspawn containers booted from a cached Debian rootfs on a private bridge.

    with Lab(slots=("chief", "worker", "worker")) as lab:     # builds/caches the rootfs, boots, waits for SSH
        lab.ssh("worker-0", "systemctl is-system-running")
        lab.cut("worker-1"); lab.restore("worker-1"); lab.reboot("worker-1")
        lab.hosts_file                                         # on-prem host file for the inventory's static source

Each host: an overlay over the rootfs, its own machine-id, host key, hostname, static /etc/hosts of every peer
and a static address on host0 (lab/guest.py). Each systemd-nspawn runs under a tiny sh supervisor in its own cgroup
that boots it again after an in-guest reboot (lab/process.py). ``down()`` stops everything it finds for the lab,
from the state on disk *and* from the cgroups, mounts and links themselves, so it also cleans up after a crashed
run, and is safe to call again.

``layers`` (prepared lower layers, lab/layers.py: the runtime installed once) are stacked between each host's own
overlay and the rootfs.

A cloud-like lab (the AWS twin, lab/twin.py) also takes: ``addresses`` (the instances' private IPs, in ``subnet``),
``user``/``user_key`` (a cloud image's login user with passwordless sudo and the key pair's key), ``sshd_delay``
({host: seconds}: sshd starts late, as on a booting instance; start() does not wait for those hosts) and ``bastion``
(a jump host with a second leg on a front bridge; ``isolate()`` then takes the control machine off the lab bridge).
``rekey(host)`` gives a host a new SSH host key. ``limit_cpu(cores)`` and ``weigh_cpu(weight)`` set the CPU the
whole lab gets (the cgroup cpu controller, lab/system.py).
"""

from __future__ import annotations

import dataclasses
import logging
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from pathlib import Path

from lab import guest, process, system
from lab.access import Access, port_open, ssh_address
from lab.admin import locked, setup
from lab.config import (
    DEFAULT_LAB,
    DEFAULT_PORT,
    LabError,
    LabHost,
    LabSpec,
    bridge_name,
    check_name,
    check_subnet,
    front_bridge_name,
    make_spec,
    pick_subnet,
)
from lab.paths import LabPaths, default_lab_dir
from tfcluster.core.contract import CHIEF, WORKER

log = logging.getLogger(__name__)

BOOT_TIMEOUT = 180.0  # seconds for a host to reach running/degraded and answer SSH (2 cores at load 12)


class Lab(Access):
    """N hosts on a bridge. ``start()``/``down()`` or use it as a context manager; ``Lab.attach(name)`` for a
    lab that another process (``python -m lab up``) started."""

    def __init__(self, slots: Sequence[str] = (CHIEF, WORKER, WORKER), *, name: str = DEFAULT_LAB,
                 names: Sequence[str] | None = None, subnet: str | None = None, port: int = DEFAULT_PORT,
                 bind_ro: Sequence[str] = (), lab_dir: Path | None = None, boot_timeout: float = BOOT_TIMEOUT,
                 addresses: Sequence[str] | None = None, bastion: str | None = None, user: str | None = None,
                 user_key: str | None = None, sshd_delay: Mapping[str, int] | None = None,
                 layers: Sequence[Path] = (), bind: Sequence[str] = (), machine_prefix: str = "") -> None:
        self.paths = LabPaths(lab_dir or default_lab_dir(), check_name(name, "lab name"))
        self._slots = tuple(slots)
        self._names = tuple(names) if names is not None else None
        self._subnet = subnet
        self._port = port
        self._bind_ro = tuple(bind_ro)
        self._bind = tuple(bind)  # read-write binds (a directory every host shares)
        # A cloud-like lab (the AWS twin): instance addresses, a jump host, the image's login user, a late sshd.
        self._cloud = {"addresses": addresses, "bastion": bastion, "user": user, "user_key": user_key,
                       "sshd_delay": dict(sshd_delay or {})}
        self._layers = tuple(layers)  # prepared layers stacked over the rootfs (lab/layers.py), top first
        self._machine_prefix = machine_prefix  # before each host's machine name (its links): config.make_spec
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
        system.ensure_inotify()
        with locked(self.paths.root):
            if self.paths.run.exists() or any(g.is_dir() for g in self._groups()):
                log.info("lab %s has state left from an earlier run; cleaning it up first", self.paths.lab)
                self._down_locked()
            spec = self._make_spec(system.used_networks())
            self._check_free(spec)
            # The subnet is this lab's now: an `unreachable` route a crashed run left (isolate, go_offline) would cut
            # the control machine off from every host ("No route to host").
            system.set_unreachable(spec.subnet, on=False)
            self.spec = spec
            self.paths.run.mkdir(parents=True)
            (self.paths.run / "logs").mkdir()
            self.paths.spec.write_text(spec.to_json())
            started = time.monotonic()
            system.create_bridge(spec.bridge, f"{spec.control_address}/{spec.network.prefixlen}")
            if spec.bastion is not None:
                system.create_bridge(spec.front_bridge, f"{spec.front_control_address}/{spec.front_subnet_prefix}")
            for host in spec.hosts:
                self._prepare_host(host)
            self._write_control_files(isolated=False)
            for host in spec.hosts:
                self._boot(host)
        self.wait_ready([h.name for h in spec.hosts if not h.sshd_delay])
        self.boot_seconds = time.monotonic() - started
        log.info("lab %s: %d hosts up in %.1f s on %s (%s)", spec.name, len(spec.hosts), self.boot_seconds,
                 spec.bridge, spec.subnet)
        return self

    def _groups(self) -> list[Path]:
        """The lab's cgroups: its hosts' tops and its cpu group."""
        group = system.cpu_group(self.paths.lab)
        return [*system.lab_cgroups(self.paths.lab), *([group] if group is not None else [])]

    def _make_spec(self, used: list[str]) -> LabSpec:
        subnet = check_subnet(self._subnet, len(self._slots), used) if self._subnet else pick_subnet(used)
        front = pick_subnet([*used, subnet]) if self._cloud["bastion"] else None
        return make_spec(self.paths.lab, self._slots, subnet, port=self._port, names=self._names,
                         bind_ro=self._bind_ro, bind=self._bind, front_subnet=front,
                         machine_prefix=self._machine_prefix, **self._cloud)  # type: ignore[arg-type]

    def down(self) -> None:
        """Stop every host, unmount, remove cgroups, the bridge and the lab's state. Safe to call again."""
        with locked(self.paths.root):
            self._down_locked()

    def _hosts_on_disk(self) -> set[str]:
        """Every host of the lab, from its spec on disk and from the cgroups and overlays themselves."""
        spec = self._spec_on_disk()
        hosts = set(spec_host.name for spec_host in spec.hosts) if spec else set()
        for group in system.lab_cgroups(self.paths.lab):
            if group.is_dir():
                hosts.update(p.name for p in group.iterdir() if p.is_dir())
        hosts_dir = self.paths.run / "hosts"
        if hosts_dir.is_dir():
            hosts.update(p.name for p in hosts_dir.iterdir())
        return hosts

    def _spec_on_disk(self) -> LabSpec | None:
        if self.spec is None and self.paths.spec.exists():
            try:
                return LabSpec.from_json(self.paths.spec.read_text())
            except (OSError, ValueError, KeyError, TypeError):
                return None
        return self.spec

    def _down_locked(self) -> None:
        hosts = self._hosts_on_disk()
        spec = self._spec_on_disk()
        if spec is not None:  # isolated or offline (the laptop tests): the route goes with the lab
            system.set_unreachable(spec.subnet, on=False)
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
        try:
            system.remove_cpu_group(self.paths.lab)
        except (LabError, OSError) as exc:
            errors.append(str(exc))
        for base in system.cgroup_bases():  # the shared top, once no lab uses it
            with suppress(OSError):
                (base / system.CGROUP_TOP).rmdir()
        try:
            system.delete_link(bridge_name(self.paths.lab))
            system.delete_link(front_bridge_name(self.paths.lab))
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
        for bridge in (spec.bridge, spec.front_bridge):
            if system.link_exists(bridge):
                raise LabError(f"bridge {bridge} already exists; `python -m lab down --name {spec.name}`")
        for host in spec.hosts:
            if system.link_exists(host.veth) or system.link_exists(host.front_veth):
                raise LabError(f"host name {host.name!r} is in use by another lab (link {host.veth} exists); "
                               "down that lab or give this one other host names")

    def _prepare_host(self, host: LabHost) -> str:
        """Overlay + every file of the host (lab/guest.py); returns the host's public SSH host key."""
        d = self.paths.host_dir(host.name)
        merged = self.paths.merged(host.name)
        system.mount_overlay([*self._layers, self.paths.rootfs], d / "upper", d / "work", merged)
        return guest.prepare(merged, host, self._spec(), self.paths.private_key.with_suffix(".pub").read_text())

    def _boot(self, host: LabHost) -> None:
        self._procs[host.name] = process.boot(self.paths, self._spec(), host)

    def _signal_host(self, host: str) -> None:
        process.signal_host(self.paths, host)

    def _stop_host(self, host: str, grace: float = process.STOP_TIMEOUT) -> None:
        process.stop_host(self.paths, host, self._procs.pop(host, None), grace)

    def start_host(self, host: str) -> None:
        """Boot a host that was powered off (its overlay kept), as a cloud instance is started again."""
        self._boot(self.host(host))

    def stop_host(self, host: str, grace: float = process.STOP_TIMEOUT) -> None:
        """Power one host off cleanly (its files stay in its overlay until down()); ``grace`` 0: killed at once, as a
        host that fails or a spot instance reclaimed without notice."""
        self._stop_host(self.host(host).name, grace)

    def reinstall(self, name: str, address: str) -> str:
        """A fresh machine in a host's place, as a replaced cloud instance: powered off if it runs, a new disk (its
        overlay's own layer emptied; the lab's layers stay below), ``address``, new host keys; booted and ready.
        Returns its public host key."""
        host = self.host(name)
        if self.nspawn_pid(name) is not None:
            self._stop_host(name)
        directory = self.paths.host_dir(name)
        system.unmount_all(directory)
        for part in ("upper", "work"):
            system.remove_tree(directory / part)
        fresh = dataclasses.replace(host, address=address)
        spec = self._spec()
        self.spec = dataclasses.replace(spec, hosts=tuple(fresh if h.name == name else h for h in spec.hosts))
        self.paths.spec.write_text(self.spec.to_json())
        key = self._prepare_host(fresh)
        self._write_control_files(self.isolated)
        self._boot(fresh)
        self.wait_ready([name])
        return key

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
            if self.isolated or port_open(ssh_address(host), 22):
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
        return process.alive(self.paths, name, self._procs.get(name))

    def log_tail(self, name: str, lines: int = 30) -> str:
        try:
            text = self.paths.log(name).read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    # ---- what tests use --------------------------------------------------------------------------------------

    def hosts_of(self, task_type: str) -> tuple[LabHost, ...]:
        return tuple(h for h in self.hosts if h.task_type == task_type)

    @property
    def members(self) -> tuple[LabHost, ...]:
        """The cluster's hosts: every host but the bastion."""
        return self._spec().members

    @property
    def bastion(self) -> LabHost | None:
        return self._spec().bastion

    @property
    def control_address(self) -> str:
        return self._spec().control_address

    def cut(self, name: str) -> None:
        """Pull the host's cable: its end of the bridge goes down, its own address and state stay."""
        system.set_link(self.host(name).veth, up=False)

    def restore(self, name: str) -> None:
        system.set_link(self.host(name).veth, up=True)

    def is_cut(self, name: str) -> bool:
        return not system.link_is_up(self.host(name).veth)

    def limit_cpu(self, cores: float | None, hosts: Sequence[str] | None = None) -> None:
        """Every host of the lab together (each of ``hosts``) gets at most ``cores`` CPUs; None lifts the limit. A
        slower cluster: a test that must find a job still training after a fixed wait (a fault, a minute offline, a
        deadline) slows the cluster for that wait instead of paying for what a full-speed cluster would train."""
        for host in hosts if hosts is not None else [None]:
            system.limit_cpu(self.paths.lab, cores, None if host is None else self.host(host).name)

    @contextmanager
    def cpu_limited(self, cores: float, hosts: Sequence[str] | None = None) -> Iterator[None]:
        """``limit_cpu(cores, hosts)`` for the block, lifted after it whatever happens."""
        self.limit_cpu(cores, hosts)
        try:
            yield
        finally:
            self.limit_cpu(None, hosts)

    def weigh_cpu(self, weight: int) -> None:
        """The lab's share of contended CPU against other labs and processes (cgroup v2's cpu.weight: 1-10000,
        default 100)."""
        system.weigh_cpu(self.paths.lab, weight)

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


def _wait_for(predicate: Callable[[], bool], deadline: float, message: str) -> None:
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise LabError(message)
