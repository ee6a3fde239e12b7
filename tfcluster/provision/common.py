"""What every provision backend shares: running Terraform (its stderr teed and kept for the error), preparing a root
(init from the registry or the offline mirror), reading a root's state and outputs, and the errors."""

from __future__ import annotations

import collections
import json
import logging
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfcluster.core.paths import REPO_ROOT
from tfcluster.provision import terraform as terraform_toolchain

LOG = logging.getLogger("provision")

ACTIONS = ("apply", "plan", "destroy", "output", "upgrade", "known-hosts")

# The AWS twin test (lab/twin.py) writes this into infra/aws while it runs: the provider then talks to an emulator.
TWIN_OVERRIDE = "tfcluster_twin_override.tf"

TWIN_ENV = "TFCLUSTER_TWIN"

class ProvisionError(RuntimeError):
    """A provisioning step failed; the message names the step and the fix (`output`: Terraform's stderr)."""

    def __init__(self, message: str, output: str = "") -> None:
        super().__init__(message)
        self.output = output

def tf_dir_for(root: str, env: Mapping[str, str], override: str | None = None) -> Path:
    """The Terraform root of a run: --tf-dir, else $TFCLUSTER_TF_DIR, else infra/<root> of the backend."""
    raw = override or env.get("TFCLUSTER_TF_DIR") or str(REPO_ROOT / "infra" / root)
    path = Path(raw).resolve()
    if not (path / "main.tf").is_file():
        raise ProvisionError(f"{path} is not a Terraform root module (no main.tf). "
                             f"Fix: TFCLUSTER_TF_DIR=infra/{root}")
    return path

def hcl_value(value: Any) -> str:
    """A Python value as an HCL literal for -var (JSON is valid HCL for maps, lists, numbers and strings)."""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)

def var_args(pairs: Sequence[str]) -> list[str]:
    return [arg for pair in pairs for arg in ("-var", pair)]

def run_terraform(args: Sequence[str], tf_dir: Path, env: Mapping[str, str], capture: bool = False,
                  check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run terraform in `tf_dir`. Not captured: the output goes to the terminal (prompts work) and the last lines of
    stderr still come back in `.stderr` (to explain AWS errors)."""
    color = [] if sys.stdout.isatty() or args[0] in {"output", "state", "show"} else ["-no-color"]
    command = [*terraform_toolchain.terraform_command(), f"-chdir={tf_dir}", args[0], *color, *args[1:]]
    LOG.debug("running %s", " ".join(command))
    if capture:
        result = subprocess.run(command, env=dict(env), text=True, check=False, capture_output=True)
    else:
        result = _run_teeing_stderr(command, env)
    if check and result.returncode != 0:
        detail = (result.stderr or "")[-4000:] if capture else ""
        raise ProvisionError(f"terraform {args[0]} in {tf_dir} failed (exit {result.returncode})"
                             f"{detail and ':'}\n{detail}", result.stderr or "")
    return result

def _run_teeing_stderr(command: Sequence[str], env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    tail: collections.deque[str] = collections.deque(maxlen=400)
    proc = subprocess.Popen(list(command), env=dict(env), text=True, stderr=subprocess.PIPE)

    def copy() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            sys.stderr.write(line)
            sys.stderr.flush()
            tail.append(line)

    copier = threading.Thread(target=copy, daemon=True)
    copier.start()
    code = proc.wait()
    copier.join()
    return subprocess.CompletedProcess(list(command), code, stdout="", stderr="".join(tail))

def prepare(tf_dir: Path, env: Mapping[str, str], provider: str, *, upgrade: bool = False) -> None:
    """`terraform init` (or `get` under the mirror override) the way the provider mode needs."""
    mode = terraform_toolchain.mode_for(provider, env)
    config = Path(env.get("TF_CLI_CONFIG_FILE", ""))
    if not config.is_file():
        raise ProvisionError(f"the project's Terraform CLI config {config} is missing. Fix: `make setup` (or "
                             "`python -m tfcluster.provision.toolchain install`)")
    locked = terraform_toolchain.locked_version(tf_dir)
    args = terraform_toolchain.init_args(mode, locked, upgrade=upgrade)
    if "-upgrade" in args and not upgrade:
        LOG.info("the lock file pins hashicorp/aws %s (the offline mirror's); taking the newest version the root "
                 "allows from the registry (terraform init -upgrade)", locked)
    if mode == terraform_toolchain.OVERRIDE:
        LOG.info("aws provider %s from the offline mirror (TFCLUSTER_TF_MIRROR=1), as a development override: the "
                 "lock file is left as it is", terraform_toolchain.PROVIDER_VERSION)
    run_terraform(args, tf_dir, env, capture=True)

def state_resources(tf_dir: Path, env: Mapping[str, str]) -> list[str]:
    result = run_terraform(["state", "list"], tf_dir, env, capture=True, check=False)
    return [line for line in result.stdout.splitlines() if line.strip()] if result.returncode == 0 else []

def state_outputs(tf_dir: Path, env: Mapping[str, str]) -> dict[str, Any]:
    """`terraform output -json` of the applied state as {name: value}; {} before the first apply or on any error
    (`output -raw` would print Terraform's "No outputs found" warning to stdout with exit 0)."""
    result = run_terraform(["output", "-json"], tf_dir, env, capture=True, check=False)
    try:
        found = json.loads(result.stdout) if result.returncode == 0 else {}
    except ValueError:
        return {}
    return {name: item.get("value") for name, item in found.items()} if isinstance(found, dict) else {}

def state_cluster_name(tf_dir: Path, env: Mapping[str, str]) -> str | None:
    """The cluster_name output of the applied state, if any."""
    name = state_outputs(tf_dir, env).get("cluster_name")
    return name if isinstance(name, str) and name else None

def planned_hosts(plan: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The `hosts` output of a `terraform show -json PLAN` document (unknown values are None)."""
    after = plan.get("output_changes", {}).get("hosts", {}).get("after")
    if not isinstance(after, list):  # no change: the planned value is complete
        after = plan.get("planned_values", {}).get("outputs", {}).get("hosts", {}).get("value")
    return [dict(h) for h in after] if isinstance(after, list) else []


@dataclass(frozen=True)
class Options:
    """What `python -m tfcluster.provision` passes a backend besides the action, the root and its environment."""

    workers: int | None = None
    extra: tuple[str, ...] = ()  # KEY=VALUE terraform variables
    auto_approve: bool = False
    keep_endpoint: bool = False  # local destroy: leave the emulated endpoint running
    plan_hosts: Path | None = None  # plan: write the planned `hosts` output here (JSON) for the plan view


def write_planned_hosts(tf_dir: Path, env: Mapping[str, str], plan_file: Path, out: Path | None) -> None:
    """`terraform show -json` of a saved plan -> its planned `hosts` output, as JSON in ``out`` (the `tfcluster
    plan` command renders them with the inventory's own TF_CONFIG code)."""
    if out is None:
        return
    shown = run_terraform(["show", "-json", str(plan_file)], tf_dir, env, capture=True)
    out.write_text(json.dumps(planned_hosts(json.loads(shown.stdout)), sort_keys=True))
