"""Local slots for the playbook tests: a cluster of connection=local hosts on free loopback ports, playbook runs
with extra vars as the `tfcluster` command writes them (a JSON file, user strings marked unsafe), and cleanup."""

from __future__ import annotations

import contextlib
import json
import os
import random
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tests.ports import free_port_block
from tfcluster.host import supervisor

REPO = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
PLAYBOOKS = tuple(sorted(p.name for p in (REPO / "playbooks").glob("*.yml")))  # every playbook a command runs
BYO = str(HERE / "byo_job.py")
# BYO jobs import no TensorFlow: skip the import checks there (one test keeps them).
NO_TF = {"tf_job_preflight_imports": [], "python_runtime_verify_imports": [], "tf_job_poll_interval": 1}
# What the user typed: never templated (the `tfcluster` command marks these unsafe).
USER_VARS = ("tfcluster_job", "tfcluster_script", "tfcluster_script_args", "tfcluster_trainer_args")


def unsafe(value: object) -> object:
    """A value as the `tfcluster` command writes it into the extra-vars file: every string marked unsafe."""
    if isinstance(value, str):
        return {"__ansible_unsafe": value}
    if isinstance(value, list):
        return [unsafe(v) for v in value]
    return value


@dataclass
class Cluster:
    tmp: Path
    workers: int = 2
    name: str = field(default_factory=lambda: f"pbtest-{os.getpid()}-{random.randint(0, 99999)}")
    base_port: int = 0  # 0: a free block of its own
    local_root: Path | None = None  # None: tmp/local

    def __post_init__(self) -> None:
        self.base_port = self.base_port or free_port_block(self.workers)
        self.local_root: Path = self.local_root or self.tmp / "local"
        self.artifacts = self.tmp / "artifacts"

    def sharing(self, tmp: Path) -> Cluster:
        """The same slots (name, ports, hosts) for another test, with its own vars files and artifacts."""
        return Cluster(tmp, self.workers, self.name, self.base_port, self.local_root)

    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        for key in [k for k in env if k.startswith(("TFCLUSTER_", "ANSIBLE_"))]:
            del env[key]
        env.update({
            "PATH": f"{BIN}:{env.get('PATH', '')}",
            "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
            "ANSIBLE_INVENTORY_UNPARSED_FAILED": "true",
            "ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED": "true",
            "ANSIBLE_NOCOLOR": "1",
            "TFCLUSTER_SOURCE": "local",
            "TFCLUSTER_WORKERS": str(self.workers),
            "TFCLUSTER_BASE_PORT": str(self.base_port),
            "TFCLUSTER_CLUSTER": self.name,
        })
        env.update(extra)
        return env

    def host_dir(self, host: str) -> Path:
        return self.local_root / self.name / host

    def playbook(self, playbook: str, job: str, *args: str, extra_vars: dict | None = None,
                 env: dict[str, str] | None = None, timeout: float = 400) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(playbook, job, *args, extra_vars=extra_vars), cwd=REPO, env=env or self.env(),
                              capture_output=True, text=True, timeout=timeout, check=False)

    def argv(self, playbook: str, job: str, *args: str, extra_vars: dict | None = None) -> list[str]:
        variables = {"tfcluster_job": job, "tfcluster_cluster": "test", "tfcluster_local_root": str(self.local_root),
                     "tfcluster_artifacts": str(self.artifacts / job), **(extra_vars or {})}
        variables = {k: unsafe(v) if k in USER_VARS else v for k, v in variables.items()}
        path = self.tmp / f"vars-{len(list(self.tmp.glob('vars-*.json')))}.json"
        path.write_text(json.dumps(variables))
        return [str(BIN / "ansible-playbook"), "-i", str(REPO / "inventory/slots.py"),
                str(REPO / "playbooks" / playbook), "-e", f"@{path}", *args]

    def stop_everything(self) -> None:
        for spec in self.local_root.glob("*/*/etc/tfcluster/*.json"):
            with contextlib.suppress(ValueError, OSError):
                supervisor.stop(str(spec))


def recap(output: str) -> dict[str, dict[str, int]]:
    """PLAY RECAP counters per host."""
    result: dict[str, dict[str, int]] = {}
    text = output.split("PLAY RECAP", 1)[-1]
    for line in text.splitlines():
        parts = line.split(":", 1)
        if len(parts) == 2 and "ok=" in parts[1]:
            result[parts[0].strip()] = {k: int(v) for k, v in (kv.split("=") for kv in parts[1].split())}
    return result


def assert_ok(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]


def byo_vars(args: str | list[str], **more: object) -> dict:
    return {"tfcluster_script": BYO, "tfcluster_script_args": args.split() if isinstance(args, str) else args,
            **NO_TF, **more}
