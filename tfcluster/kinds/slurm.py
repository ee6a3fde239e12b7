"""CLUSTER=slurm: the same job on a Slurm cluster, reached through its login node (SLURM=slurm.yml).

Nothing is provisioned and no playbook runs: `make train` stages the release (trainer or SCRIPT, the ground floor,
the datasets) on the cluster's shared directory by content digest, submits one batch job whose single step is
``srun --kill-on-bad-exit=1 ... python -m tfcluster.host.slurm_task run SPEC`` (every task resolves its own slot and
TF_CONFIG in Slurm's order: tfcluster/core/slurm.py), and then watches it with the same wait decision and view as the
other kinds; only the transport differs (tfcluster/kinds/slurm_login.py: SSH to the login node). The cluster file,
the job spec and the batch script: tfcluster/kinds/slurm_file.py.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from tfcluster.core import contract
from tfcluster.core.contract import Problem
from tfcluster.kinds.base import Kind, KindError, Target, Traits
from tfcluster.kinds.slurm_file import (
    ClusterFile,
    ClusterFileError,
    Layout,
    Submission,
    job_spec,
    load_cluster_file,
    render_sbatch,
    sample_tf_configs,
)


# --- the kind -------------------------------------------------------------------------------------------------------
class SlurmKind(Kind):
    name: ClassVar[str] = "slurm"
    summary: ClassVar[str] = "a Slurm cluster, through its login node (SLURM=slurm.yml)"
    cluster_file_setting: ClassVar[str | None] = "SLURM"
    traits: ClassVar[Traits] = Traits(autostop=False, firewall=False, boot_wait=60)

    def cluster_file(self, target: Target) -> ClusterFile:
        return load_cluster_file(target.cluster_file, target.strategy)

    def cluster_name(self, target: Target, cf: ClusterFile) -> str:
        """The cluster file's ``cluster_name`` unless TFCLUSTER_CLUSTER names one (target.name is its default)."""
        return cf.cluster_name if cf.cluster_name and target.name == f"tfcluster-{self.name}" else target.name

    def setting_problems(self, target: Target) -> list[Problem]:
        try:
            self.cluster_file(target)
        except ClusterFileError as exc:
            return list(exc.problems)
        return []

    def source_env(self, target: Target) -> dict[str, str]:
        return {}

    def inventory_env(self, target: Target, env: Mapping[str, str]) -> dict[str, str]:
        """No inventory: the cluster is reached through its login node, not host by host."""
        return {"TFCLUSTER_CLUSTER": target.name, "TFCLUSTER_KIND": self.name,
                "TFCLUSTER_KIND_TRAITS": self.traits.to_json()}

    def provision_argv(self, target: Target, action: str) -> list[str]:
        raise KindError(f"CLUSTER=slurm has nothing to {action}: the Slurm cluster exists. Fix: to make hosts you "
                        "have a Slurm cluster, `make slurm-up CLUSTER=onprem HOSTS=...` (or CLUSTER=aws)")

    def plan_lines(self, target: Target, env: Mapping[str, str], run: Any) -> tuple[int, list[str]]:
        """The batch script and every task's TF_CONFIG on a sample allocation; contacts nothing."""
        from tfcluster.prepare import release

        try:
            cf = self.cluster_file(target)
        except ClusterFileError as exc:
            return contract.EXIT_BAD_INPUT, [str(p) for p in exc.problems]
        with tempfile.TemporaryDirectory(prefix="tfcluster-plan-") as tmp:
            digest = release.stage(Path(tmp), release.release_sources(release.REPO))["digest"]
        name = self.cluster_name(target, cf)
        layout = Layout(cf.shared_dir, name, target.job or "JOB")
        program = {"args": ["..."]}
        spec = job_spec(cf, job=layout.job, layout=layout, release=digest, datasets="", strategy=target.strategy,
                        program=program, legacy_keras=False, max_duration=None)
        sub = Submission(cluster=cf, cluster_name=name, job=layout.job, release=digest, spec=spec)
        lines = [f"cluster file {cf.path}: {cf.nodes} node(s) x {cf.tasks_per_node} task(s) on partition "
                 f"{cf.partition} via {cf.login.user}@{cf.login.host}; layout "
                 + ", ".join(f"{n} {t}" for t, n in cf.tasks.items()),
                 f"batch script ({sub.script_path}):", *("  " + line for line in render_sbatch(sub).splitlines())]
        return 0, [*lines, *sample_tf_configs(cf, target.strategy)]

    def transport(self, target: Target) -> Any:
        from tfcluster.kinds.slurm_login import SlurmTransport

        cf = self.cluster_file(target)
        return SlurmTransport(cf, self.cluster_name(target, cf), target)

