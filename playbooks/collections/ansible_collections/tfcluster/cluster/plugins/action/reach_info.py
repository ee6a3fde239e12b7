"""Action plugin: how the control machine reaches this host outside Ansible, resolved by Ansible itself.

Runs on the control machine only (no module, no contact with the host): it reads the options Ansible resolved for
this host's connection plugin (address, port, user, key, ssh arguments, host key checking) and become settings, and
returns them as ``reach`` — the fields of ``tfcluster.run.reach.Reach``. The wait loop, the collector's tar stream and
``make logs`` build their ssh command from it, so they reach a host exactly as Ansible does (bastion, known_hosts).
"""

from __future__ import annotations

from typing import Any

from ansible.plugins.action import ActionBase

DOCUMENTATION = r"""
name: reach_info
short_description: How the control machine reaches this host outside Ansible
description:
  - Returns C(reach), the resolved connection settings of the host (the fields of C(tfcluster.run.reach.Reach)).
  - Contacts nothing; runs on the control machine.
author: tfcluster
"""

RETURN = r"""
reach:
  description: name, connection, host, port, user, private_key_file, ssh_args, ssh_common_args, ssh_extra_args,
    host_key_checking, become, become_user, connect_timeout, password_auth.
  type: dict
  returned: always
"""

_SSH_OPTIONS = ("host", "port", "remote_user", "private_key_file", "ssh_args", "ssh_common_args", "ssh_extra_args",
                "host_key_checking", "timeout", "password")


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def _option(self, name: str) -> Any:
        try:
            return self._connection.get_option(name)
        except KeyError:
            return None

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        connection = self._connection.transport.rsplit(".", 1)[-1]
        values = {name: self._option(name) for name in _SSH_OPTIONS} if connection != "local" else {}
        result.update(changed=False, reach={
            "name": self._task_vars_name(task_vars),
            "connection": connection,
            "host": values.get("host") or self._play_context.remote_addr,
            "port": values.get("port"),
            "user": values.get("remote_user"),
            "private_key_file": values.get("private_key_file"),
            "ssh_args": values.get("ssh_args") or "",
            "ssh_common_args": values.get("ssh_common_args") or "",
            "ssh_extra_args": values.get("ssh_extra_args") or "",
            "host_key_checking": values.get("host_key_checking") is not False,
            "become": bool(self._play_context.become),
            "become_user": self._play_context.become_user or "root",
            "connect_timeout": values.get("timeout"),
            "password_auth": bool(values.get("password")),
        })
        return result

    @staticmethod
    def _task_vars_name(task_vars: dict[str, Any] | None) -> str:
        return str((task_vars or {}).get("inventory_hostname", ""))
