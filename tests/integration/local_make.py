"""`make` on an embedded local cluster of a test's own, as a user types it: its own copy of infra/ (Terraform state),
endpoint directory and port, cluster name, job ids and training ports, so it never meets a developer's cluster or
another test's. Used by the demo test and the tests of the documented `make` paths.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.ports import free_port_block

SLOT_PORTS = 8  # training ports reserved for the cluster's slots (WORKERS up to 6 beside a chief and a ps)


@dataclass
class LocalMake:
    repo: Path
    tmp: Path
    prefix: str = "make-test"
    name: str = field(init=False)
    env: dict[str, str] = field(init=False)

    def __post_init__(self) -> None:
        shutil.copytree(self.repo / "infra", self.tmp / "infra",
                        ignore=shutil.ignore_patterns(".terraform", "*.tfstate*"))
        self.name = f"{self.prefix}-{uuid.uuid4().hex[:8]}"
        self.env = {**os.environ, "TFCLUSTER_LOCALAWS_DIR": str(self.tmp / "localaws"),
                    "TFCLUSTER_LOCALAWS_PORT": str(free_port_block(1)),
                    "TFCLUSTER_BASE_PORT": str(free_port_block(SLOT_PORTS))}

    @property
    def make_vars(self) -> list[str]:
        """What every command of this cluster passes: its job (the cluster's name unless JOB= is given), its copy
        of infra/local and its cluster name."""
        return [f"JOB={self.name}", f"TFCLUSTER_TF_DIR={self.tmp / 'infra' / 'local'}",
                f"TFCLUSTER_CLUSTER={self.name}"]

    def make(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        """``make ARGS`` with this cluster's variables (an ARG of JOB=... replaces the default job)."""
        own = [v for v in self.make_vars if not (v.startswith("JOB=") and any(a.startswith("JOB=") for a in args))]
        return subprocess.run(["make", *args, *own], cwd=self.repo, env=self.env, capture_output=True, text=True,
                              timeout=timeout, check=False)

    def slot_dir(self, host: str) -> Path:
        return self.repo / ".cache" / "local" / self.name / host

    def job_dirs(self) -> Sequence[Path]:
        return sorted((self.repo / "artifacts" / "local").glob(f"{self.name}*"))

    def destroy(self) -> subprocess.CompletedProcess[str]:
        """Tear down (destroy also stops the endpoint and checks that no instance of the cluster is left) and
        remove what the cluster left in the checkout."""
        done = self.make("destroy", "CLUSTER=local", "FORCE=1")
        for job_dir in self.job_dirs():
            shutil.rmtree(job_dir, ignore_errors=True)
        shutil.rmtree(self.repo / ".cache" / "local" / self.name, ignore_errors=True)
        return done


def output(run: subprocess.CompletedProcess[str], tail: int = 6000) -> str:
    return run.stdout[-tail:] + run.stderr[-3000:]
