"""How the control machine reaches a host outside Ansible: the ``ssh`` command Ansible's connection would use.

The collector's tar stream, the wait loop's status polls and ``make logs`` run one command on a host over one SSH
connection (multiplexed with Ansible's own when ``ssh_args`` carry ControlMaster/ControlPath), or directly for a
local slot (``ansible_connection: local``). The settings are Ansible's, already resolved for the host (inventory,
group vars, ``-e``, ansible.cfg): see :meth:`Reach.from_vars`.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

LOCAL_CONNECTIONS = frozenset({"local", "ansible.builtin.local"})
SSH_CONNECTIONS = frozenset({"ssh", "smart", "ansible.builtin.ssh", "paramiko", "ansible.builtin.paramiko_ssh"})


class ReachError(ValueError):
    """A host's connection settings cannot be turned into a command; the message names the host."""


def _text(value: Any) -> str:
    return "" if value is None else str(value)


@dataclass(frozen=True)
class Reach:
    """Everything needed to run one command on ``name``.

    ``become``: run it through ``sudo -n`` (a password prompt fails instead of hanging) as ``become_user``; skipped
    when the login user is that user already.
    """

    name: str
    connection: str = "ssh"
    host: str | None = None
    port: int | None = None
    user: str | None = None
    private_key_file: str | None = None
    ssh_args: str = ""
    ssh_common_args: str = ""
    ssh_extra_args: str = ""
    host_key_checking: bool = True
    become: bool = False
    become_user: str = "root"
    connect_timeout: int | None = None

    @property
    def local(self) -> bool:
        return self.connection in LOCAL_CONNECTIONS

    @classmethod
    def from_vars(cls, name: str, hostvars: Mapping[str, Any], defaults: Mapping[str, Any] | None = None) -> Reach:
        """From a host's resolved Ansible variables; ``defaults`` are ansible.cfg's (ssh_args, remote_user,
        private_key_file, host_key_checking, timeout) for what the host does not set."""
        defaults = defaults or {}

        def pick(*keys: str, default: Any = None) -> Any:
            for key in keys:
                if hostvars.get(key) not in (None, ""):
                    return hostvars[key]
            return default

        connection = str(pick("ansible_connection", default="ssh"))
        if connection not in LOCAL_CONNECTIONS | SSH_CONNECTIONS:
            raise ReachError(f"{name}: connection {connection!r} cannot be reached outside Ansible. Fix: use ssh or "
                             "local, or collector_transport=fetch")
        port = pick("ansible_port", "ansible_ssh_port")
        checking = pick("ansible_ssh_host_key_checking", "ansible_host_key_checking",
                        default=defaults.get("host_key_checking", True))
        return cls(
            name=name,
            connection=connection,
            host=_text(pick("ansible_host", "ansible_ssh_host", default=name)),
            port=int(port) if port not in (None, "") else None,
            user=_text(pick("ansible_user", "ansible_ssh_user", default=defaults.get("remote_user"))) or None,
            private_key_file=_text(pick("ansible_ssh_private_key_file", "ansible_private_key_file",
                                        default=defaults.get("private_key_file"))) or None,
            ssh_args=_text(pick("ansible_ssh_args", default=defaults.get("ssh_args"))),
            ssh_common_args=_text(pick("ansible_ssh_common_args", default=defaults.get("ssh_common_args"))),
            ssh_extra_args=_text(pick("ansible_ssh_extra_args", default=defaults.get("ssh_extra_args"))),
            host_key_checking=str(checking).lower() not in ("false", "no", "0", "off"),
            become=str(pick("ansible_become", default=False)).lower() in ("true", "yes", "1", "on"),
            become_user=_text(pick("ansible_become_user", default="root")),
            connect_timeout=int(defaults["timeout"]) if defaults.get("timeout") else None,
        )

    @classmethod
    def from_info(cls, info: Mapping[str, Any]) -> Reach:
        """From what the ``tfcluster.cluster.reach_info`` action plugin returned for a host (Ansible's own resolution
        of its connection options)."""
        fields = {key: info.get(key) for key in ("name", "connection", "host", "user", "private_key_file")}
        port, timeout = info.get("port"), info.get("connect_timeout")
        return cls(**{k: (str(v) if v is not None else None) for k, v in fields.items()},  # type: ignore[arg-type]
                   port=int(port) if port not in (None, "") else None,
                   ssh_args=_text(info.get("ssh_args")), ssh_common_args=_text(info.get("ssh_common_args")),
                   ssh_extra_args=_text(info.get("ssh_extra_args")),
                   host_key_checking=bool(info.get("host_key_checking", True)),
                   become=bool(info.get("become")), become_user=_text(info.get("become_user")) or "root",
                   connect_timeout=int(timeout) if timeout not in (None, "") else None)

    def ssh_options(self) -> list[str]:
        """``ssh`` options before the destination, in Ansible's order (for ssh the first value of an option wins:
        the user's own arguments come before our fallbacks)."""
        argv = ["-o", "BatchMode=yes"]
        for settings in (self.ssh_args, self.ssh_common_args, self.ssh_extra_args):
            argv += shlex.split(settings)
        if not self.host_key_checking:
            argv += ["-o", "StrictHostKeyChecking=no"]
        if self.connect_timeout:
            argv += ["-o", f"ConnectTimeout={self.connect_timeout}"]
        if self.port:
            argv += ["-p", str(self.port)]
        if self.user:
            argv += ["-l", self.user]
        if self.private_key_file:
            argv += ["-i", os.path.expanduser(self.private_key_file)]
        return argv

    def argv(self, command: Sequence[str], extra_ssh_options: Sequence[str] = ()) -> list[str]:
        """The argv that runs ``command`` (a list of words, quoted here) on the host."""
        words = list(command)
        if self.become and self.user != self.become_user:
            words = ["sudo", "-n", "-u", self.become_user, "--", *words]
        if self.local:
            return words
        if not self.host:
            raise ReachError(f"{self.name}: no address (ansible_host). Fix: check the inventory")
        return ["ssh", *self.ssh_options(), *extra_ssh_options, "--", self.host, shlex.join(words)]
