"""Reaching a lab's hosts from the control machine: ssh as root with the lab's key and strict host keys, the
files a user would get (known_hosts, ssh_config, host file with host_keys), a host key that changes, and isolation
behind a bastion. A mixin of ``Lab`` (lab/lab.py), which provides ``paths``, ``hosts``, ``host()`` and ``_spec()``.
"""

from __future__ import annotations

import logging
import socket
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from lab import guest, system
from lab.config import LabError, LabHost, LabSpec
from lab.render import render_hosts_file, render_known_hosts, render_ssh_config
from tfcluster import kinds

if TYPE_CHECKING:
    from lab.paths import LabPaths

log = logging.getLogger(__name__)


class Access:
    """ssh, keys and isolation of a lab's hosts."""

    paths: LabPaths

    def _spec(self) -> LabSpec:  # provided by Lab
        raise NotImplementedError

    @property
    def hosts(self) -> tuple[LabHost, ...]:
        return self._spec().hosts

    def host(self, name: str) -> LabHost:
        return self._spec().host(name)

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

    def _write_control_files(self, isolated: bool) -> None:
        """known_hosts, ssh_config and the host file, from the hosts' current keys (isolated: through the bastion)."""
        spec = self._spec()
        keys = self.host_keys()
        self.paths.known_hosts.write_text(render_known_hosts([(h, keys[h.name]) for h in spec.hosts]))
        key = str(self.paths.private_key)
        self.paths.ssh_config.write_text(render_ssh_config(spec, key, str(self.paths.known_hosts), isolated))
        self.paths.hosts_file.write_text(render_hosts_file(spec, key, keys, isolated))

    def inventory_env(self) -> dict[str, str]:
        """Environment for `make ... CLUSTER=onprem` / ansible against this lab: the inventory's static source
        reads the host file; Ansible takes the key from ANSIBLE_PRIVATE_KEY_FILE and checks host keys against the
        lab's known_hosts (TFCLUSTER_KNOWN_HOSTS: the path the `tfcluster` command gives a cluster's own file). The
        lab hosts are an on-prem cluster: the onprem kind's facts, as `make train CLUSTER=onprem` gives them."""
        onprem = kinds.get("onprem")
        return {"TFCLUSTER_SOURCE": "static", "TFCLUSTER_HOSTS_FILE": str(self.hosts_file),
                "ANSIBLE_PRIVATE_KEY_FILE": str(self.private_key), "TFCLUSTER_KNOWN_HOSTS": str(self.known_hosts),
                "TFCLUSTER_KIND": onprem.name, "TFCLUSTER_KIND_TRAITS": onprem.traits.to_json()}

    def host_keys(self) -> dict[str, str]:
        """{host: its public SSH host key} as the hosts have them now."""
        return {h.name: guest.host_key(self.paths.merged(h.name)) for h in self.hosts}

    def rekey(self, name: str) -> str:
        """Give a host a new SSH host key (a reinstalled machine, or someone in the middle); returns it. The lab's
        own known_hosts, ssh_config and host file follow; a cluster's known_hosts written earlier does not."""
        old = guest.host_key(self.paths.merged(name))
        new = guest.new_host_key(self.paths.merged(name), name)
        host = self.host(name)
        # ssh accepts either key while sshd restarts; then only the new one is known
        with open(self.paths.known_hosts, "a") as handle:
            handle.write(render_known_hosts([(host, new)]))
        self.ssh(name, "systemctl restart ssh.service", timeout=120)  # 30 s ran out on a loaded 2-core machine
        self._write_control_files(self.isolated)
        log.info("host %s: host key %s replaced by %s", name, old.split()[1][-12:], new.split()[1][-12:])
        return new

    @property
    def isolated(self) -> bool:
        return (self.paths.run / "isolated").exists()

    def isolate(self) -> None:
        """Take the control machine off the lab bridge: the members are reachable only through the bastion (whose
        front address stays reachable). The lab's ssh_config and host file go through the bastion from now on."""
        spec = self._spec()
        if spec.bastion is None:
            raise LabError(f"lab {spec.name} has no bastion: start it with Lab(..., bastion=NAME) to isolate it")
        system.del_address(spec.bridge, f"{spec.control_address}/{spec.network.prefixlen}")
        system.set_unreachable(spec.subnet, on=True)  # not even through this machine's default route
        (self.paths.run / "isolated").touch()
        self._write_control_files(isolated=True)

    def rejoin(self) -> None:
        """Undo isolate(): the control machine is on the lab bridge again."""
        spec = self._spec()
        system.set_unreachable(spec.subnet, on=False)
        system.add_address(spec.bridge, f"{spec.control_address}/{spec.network.prefixlen}")
        (self.paths.run / "isolated").unlink(missing_ok=True)
        self._write_control_files(isolated=False)

    @property
    def offline(self) -> bool:
        return (self.paths.run / "offline").exists()

    def go_offline(self) -> None:
        """The control machine loses its network (a laptop off the Wi-Fi): its address on the lab bridge goes and the
        lab's subnet is unreachable from it (ssh fails to connect; an open connection dies at its ServerAlive),
        while the hosts still reach each other over the bridge and train on. go_online() undoes it."""
        spec = self._spec()
        system.del_address(spec.bridge, f"{spec.control_address}/{spec.network.prefixlen}")
        system.set_unreachable(spec.subnet, on=True)
        (self.paths.run / "offline").touch()

    def go_online(self) -> None:
        spec = self._spec()
        system.set_unreachable(spec.subnet, on=False)
        system.add_address(spec.bridge, f"{spec.control_address}/{spec.network.prefixlen}")
        (self.paths.run / "offline").unlink(missing_ok=True)

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
        """Does the host's SSH port accept a TCP connection from the control machine (directly)?"""
        return port_open(ssh_address(self.host(name)), 22, timeout)


def ssh_address(host: LabHost) -> str:
    """Where the control machine reaches a host's sshd: a bastion at its front address, the others directly."""
    return host.front_address or host.address


def port_open(address: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return True
    except OSError:
        return False
