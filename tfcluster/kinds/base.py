"""The cluster-kind interface: what a kind (local, aws, onprem, ...) decides, and nothing else decides it.

Every command of the `tfcluster` CLI asks its kind, found once in the routing table (``tfcluster.kinds.KINDS``),
instead of testing the kind's name. A kind is a subclass of :class:`Kind` in a module of its own; adding one means
adding that module and a row in the table (docs/ARCHITECTURE.md, "Cluster kinds", says what it implements).

The class attributes say what a kind is; the methods are what differs between kinds:

* ``inventory_env`` — what the inventory script reads to build this cluster's inventory (its source, a host file or
  a Terraform root, the cluster's known_hosts) and the traits the roles read (``tfcluster_kind_traits``);
* ``known_hosts`` — the cluster's own known_hosts file, or None (the user's);
* ``playbook_vars`` — what the kind tells the playbooks beyond the settings (a wheelhouse, the root's outputs);
* ``provision_argv`` / ``plan`` — the machines, through ``python -m tfcluster.provision`` (a kind with nothing to
  provision refuses with a fix; its plan is the inventory's TF_CONFIG view);
* ``still_running`` — what of the cluster still runs and costs, printed at the end of `make train`;
* ``ec2`` — an EC2 client for `make clusters`, `make autostop DOWN=...` and the end-of-train summary;
* ``start`` — `make start`: start a stopped cluster, wait for it, refresh its addresses (a kind without instances
  refuses with a fix);
* ``expires_at`` — when the cluster expires (its hosts power off), or None;
* ``transport`` — None for a kind whose commands run playbooks (local, aws, onprem); a scheduler kind (slurm)
  returns an object the commands use instead (its methods take plain values: stage, submit, poll, stop, logs,
  collect; tfcluster/kinds/slurm_login.py), with ``cluster_file_setting`` (the Make variable naming its cluster file,
  e.g. SLURM) and ``setting_problems`` (that file's problems, reported with the settings' own: exit 2).
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

from tfcluster.core.contract import Problem
from tfcluster.core.paths import REPO_ROOT
from tfcluster.provision import terraform as toolchain


class KindError(RuntimeError):
    """The kind cannot do what was asked; the message says why and the fix."""


@dataclass(frozen=True)
class Target:
    """The cluster a command acts on, in the plain values a kind needs (from the checked settings)."""

    kind: str
    name: str  # the cluster name (TFCLUSTER_CLUSTER, default tfcluster-<kind>)
    strategy: str = "auto"
    workers: int = 2
    tf_dir: Path | None = None  # TFCLUSTER_TF_DIR: another Terraform root than infra/<backend>
    hosts_file: Path | None = None  # HOSTS
    wheelhouse: Path | None = None  # WHEELHOUSE
    auto_approve: bool = False
    cluster_file: Path | None = None  # the kind's cluster file (its cluster_file_setting: SLURM=...)
    job: str = "mnist"  # JOB: `make plan` of a scheduler kind shows the job's own batch script


@dataclass(frozen=True)
class JobRequest:
    """The job a scheduler kind's transport runs, in plain values (from the checked settings)."""

    job: str
    strategy: str = "auto"
    script: Path | None = None
    script_args: tuple[str, ...] = ()
    script_keras: str = "legacy"
    script_requirements: Path | None = None
    trainer_args: tuple[str, ...] = ()
    epochs: int | None = None
    max_duration: int | None = None  # seconds (MAX_DURATION): the scheduler's time limit
    datasets: tuple[str, ...] = ()
    wheelhouse: Path | None = None


@dataclass(frozen=True)
class Traits:
    """What the roles read of the kind (the inventory puts it in every host's ``tfcluster_kind_traits``), so that no
    role decides by the kind's name: the defaults of ``autostop_enabled``, ``firewall_enabled`` and the time a
    fresh host is waited for."""

    autostop: bool = False  # idle autostop on by default (cloud instances cost money)
    firewall: bool = True  # the training port only from peers and, on a host, the job's user
    boot_wait: int = 60  # seconds a host that does not answer SSH is waited for (a new cloud instance boots)

    def to_json(self) -> str:
        return json.dumps({"autostop": self.autostop, "firewall": self.firewall, "boot_wait": self.boot_wait},
                          sort_keys=True)


class Kind:
    """One cluster kind. Subclasses set the class attributes and override what differs."""

    name: ClassVar[str]
    summary: ClassVar[str]  # one line for `make help` and the errors
    backend: ClassVar[str | None] = None  # the provision backend (python -m tfcluster.provision --backend ...)
    provider: ClassVar[str] = toolchain.MIRROR  # where its Terraform root's aws provider comes from
    needs_host_file: ClassVar[bool] = False  # HOSTS names the cluster's hosts
    has_instances: ClassVar[bool] = False  # cloud instances: DOWN (stop or terminate), $/hour, make clusters
    asks_before_apply: ClassVar[bool] = False  # provision/destroy prompt unless AUTO_APPROVE=1
    cluster_file_setting: ClassVar[str | None] = None  # the Make variable naming the kind's cluster file (SLURM)
    traits: ClassVar[Traits] = Traits()

    # --- the settings -----------------------------------------------------------------------------------------------
    def setting_problems(self, target: Target) -> list[Problem]:
        """Problems of what the kind reads beyond the settings (its cluster file), reported with theirs: exit 2."""
        return []

    # --- the transport ----------------------------------------------------------------------------------------------
    def transport(self, target: Target) -> Any:
        """None: the commands run playbooks over the inventory (every kind so far). A scheduler kind returns the
        object that stages, submits, polls, stops, follows and collects through the scheduler instead."""
        return None

    # --- the inventory ----------------------------------------------------------------------------------------------
    def tf_dir(self, target: Target) -> Path | None:
        """The Terraform root of the cluster, or None (nothing provisioned)."""
        if self.backend is None:
            return None
        return target.tf_dir or REPO_ROOT / "infra" / self.backend

    def inventory_env(self, target: Target, env: Mapping[str, str]) -> dict[str, str]:
        """What the inventory script reads (inventory/slots.py documents each variable). ``env`` is the caller's
        environment (the settings' variables and the user's TFCLUSTER_* overrides)."""
        out = {"TFCLUSTER_CLUSTER": target.name, "TFCLUSTER_STRATEGY": target.strategy,
               "TFCLUSTER_WORKERS": str(target.workers), "TFCLUSTER_KIND": self.name,
               "TFCLUSTER_KIND_TRAITS": self.traits.to_json(), **self.source_env(target)}
        # The same CLI config `python -m tfcluster.provision` uses (it reads TFCLUSTER_TF_MIRROR from the environment).
        out["TF_CLI_CONFIG_FILE"] = toolchain.terraform_env(dict(env), provider=self.provider)["TF_CLI_CONFIG_FILE"]
        known = self.known_hosts(target, {**env, **out})
        if known is not None:
            out["TFCLUSTER_KNOWN_HOSTS"] = str(known)
        return out

    def source_env(self, target: Target) -> dict[str, str]:
        """The inventory source: a provisioned kind reads its Terraform root's outputs."""
        return {"TFCLUSTER_SOURCE": "terraform", "TFCLUSTER_TF_DIR": str(self.tf_dir(target))}

    def known_hosts(self, target: Target, env: Mapping[str, str]) -> Path | None:
        """The cluster's own known_hosts file, or None: Ansible then uses the user's own."""
        return None

    # --- the playbooks ----------------------------------------------------------------------------------------------
    def playbook_vars(self, target: Target) -> dict[str, Any]:
        """What the kind tells the playbooks beyond the settings (untrusted: marked unsafe)."""
        return {}

    # --- the machines -----------------------------------------------------------------------------------------------
    def provision_argv(self, target: Target, action: str) -> list[str]:
        """``python -m tfcluster.provision ACTION --backend ...`` for this cluster."""
        if self.backend is None:
            raise KindError(f"CLUSTER={self.name} has nothing to {action}: its hosts exist already. Fix: list them in "
                            "the host file (HOSTS=...), or use CLUSTER=local or CLUSTER=aws")
        argv = [sys.executable, "-m", "tfcluster.provision", action, "--backend", self.backend]
        if target.tf_dir is not None:
            argv += ["--tf-dir", str(target.tf_dir)]
        return argv + (["--auto-approve"] if target.auto_approve else [])

    def plan_lines(self, target: Target, env: Mapping[str, str], run: Any) -> tuple[int, list[str]]:
        """`make plan`: Terraform's plan on the terminal (``run(argv, env=...)``), then every planned host's
        TF_CONFIG from the inventory's own code. (exit status, lines to print)."""
        from tfcluster.inventory.cli import plan_lines

        with tempfile.TemporaryDirectory(prefix="tfcluster-plan-") as tmp:
            hosts_file = Path(tmp) / "hosts.json"
            code = run([*self.provision_argv(target, "plan"), "--plan-hosts", str(hosts_file)], env=env)
            if code != 0:
                return code, []
            planned = json.loads(hosts_file.read_text()) if hosts_file.is_file() else []
        return 0, plan_lines(planned, target.strategy, target.name)

    def still_running(self, target: Target) -> list[str]:
        """The end of `make train`: what of the cluster still runs, its cost per hour, how to tear it down."""
        return []

    def instance_slots(self, target: Target) -> dict[str, str]:
        """{instance id: slot} of the applied state: the only instances a command may change ({}: none)."""
        return {}

    def ec2(self, target: Target) -> Any:
        """An EC2 client for the cluster's region; a kind without instances refuses."""
        raise KindError(f"CLUSTER={self.name} has no cloud instances. Fix: use CLUSTER=aws (or CLUSTER=local for the "
                        "emulated one)")

    def start(self, target: Target, env: Mapping[str, str] | None = None) -> list[str]:
        """`make start`: start the stopped instances of the cluster, wait until they run, refresh their addresses
        (Terraform) and keep the host keys already trusted. Lines to print; a kind without instances refuses."""
        raise KindError(f"CLUSTER={self.name} has no instances to start: its hosts are not started by tfcluster. "
                        "Fix: power them on yourself (then `make train` resumes an unfinished job), or use "
                        "CLUSTER=aws")

    def expires_at(self, target: Target) -> datetime | None:
        """When the cluster expires (its hosts power off then: TTL, the tfcluster:expires tag), or None."""
        return None

    # --- recovery ---------------------------------------------------------------------------------------------------
    def recover_default(self, target: Target) -> int:
        """RECOVER when not given: how many times `make train` replaces a lost host and resumes (0: it never does;
        a lost host is reported with the command that restarts the job once the user brought it back)."""
        return 0

    def lost_slots(self, target: Target) -> dict[str, str]:
        """{slot name: why} of the hosts the cluster lost (an instance terminated, stopped, or failing its status
        checks); {} for a kind whose hosts tfcluster does not own."""
        return {}

    def replace_slot(self, target: Target, slot: str) -> list[str]:
        """Replace one lost slot's machine alone (lines to print); a kind without instances refuses."""
        raise KindError(f"CLUSTER={self.name} does not own its hosts: tfcluster cannot replace {slot}. Fix: bring the "
                        "host back, then run make train again (it resumes from the newest backup)")

