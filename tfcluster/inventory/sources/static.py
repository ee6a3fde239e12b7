"""static source (on-prem): a YAML host file, e.g. inventory/onprem.example.yml.

Format::

    cluster_name: lab            # optional (TFCLUSTER_CLUSTER wins; default "onprem")
    bastion:                     # optional jump host (address required; user, port 22, host_keys optional)
      address: 203.0.113.5
      user: ops
    defaults:                    # optional, applied to every host that leaves the field out
      ssh_user: ubuntu
      ssh_port: 22
      port: 4000                 # training port (default TFCLUSTER_PORT, else contract.TF_PORT)
      gpus: 0
    hosts:
      - address: 10.0.0.10       # required: where Ansible connects
        task_type: chief         # default worker
      - name: gpu-a              # optional inventory name (default TYPE-INDEX)
        address: gpu-a.lab
        tf_address: 10.1.0.11    # optional: address peers use for training (default address)
        task_type: worker
        task_index: 0            # optional: default = next free index of its type, in file order
        gpus: 2
        host_keys: ["ssh-ed25519 AAAA..."]   # optional: the host's public keys (tfcluster/core/sshkeys.py)

Names (cluster_name, name), users and addresses are checked against the contract's patterns; anything else is
refused with a fix. A top-level list is read as ``hosts``. A file named ``*.json`` is read as JSON (same
structure; much faster to parse for thousands of hosts).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tfcluster.core.addresses import is_int
from tfcluster.core.contract import WORKER, Problem, name_problem
from tfcluster.inventory.access import parse_bastion
from tfcluster.inventory.fields import label as host_label
from tfcluster.inventory.model import DIRECT, Access, HostSpec, InventoryError, SourceResult

HOST_KEYS = frozenset({"name", "address", "tf_address", "task_type", "task_index", "port", "gpus", "ssh_user",
                       "ssh_port", "host_keys"})
DEFAULT_KEYS = frozenset({"port", "gpus", "ssh_user", "ssh_port"})
TOP_KEYS = frozenset({"cluster_name", "defaults", "hosts", "bastion"})
FIX_SHAPE = "see inventory/onprem.example.yml for the format"
CONNECT_FIX = ("remove it: a host file has no connect mode, Ansible connects to each host's `address`; to go through a "
               "jump host, add `bastion: {address: ..., user: ..., port: 22}`")


def load_host_file(path: Path) -> Any:
    """Parse the YAML file; raises InventoryError naming the file and line on failure."""
    import yaml

    field = "TFCLUSTER_HOSTS_FILE"
    if not path.is_file():
        raise InventoryError([Problem(field, f"{path} does not exist or is not a file",
                                      "point TFCLUSTER_HOSTS_FILE at a host file like inventory/onprem.example.yml")])
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InventoryError([Problem(field, f"cannot read {path}: {exc}", "make the file readable UTF-8 text")]) \
            from exc
    if path.suffix == ".json":  # JSON host files skip YAML: ~80x faster to parse for very large clusters
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise InventoryError([Problem(field, f"{path} is not valid JSON at line {exc.lineno} column {exc.colno}: "
                                          f"{exc.msg}", "fix the JSON syntax, or use a .yml host file")]) from exc
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: ~10x faster on big files
    try:
        return yaml.load(text, Loader=loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        what = getattr(exc, "problem", None) or str(exc)
        raise InventoryError([Problem(field, f"{path} is not valid YAML{where}: {what}",
                                      "fix the YAML syntax (see inventory/onprem.example.yml)")]) from exc


def _type_key(entry: Mapping[str, Any]) -> str:
    task_type = entry.get("task_type", WORKER)
    return task_type if isinstance(task_type, str) else repr(task_type)


def _assign_indices(entries: list[Mapping[str, Any]]) -> list[object]:
    """Index of each entry: as given, else the lowest index of its type not yet used, in file order."""
    used: dict[str, set[int]] = {}
    for entry in entries:
        index = entry.get("task_index")
        if is_int(index):
            used.setdefault(_type_key(entry), set()).add(index)  # type: ignore[arg-type]
    next_free: dict[str, int] = {}
    result: list[object] = []
    for entry in entries:
        if "task_index" in entry:
            result.append(entry["task_index"])
            continue
        key = _type_key(entry)
        taken = used.setdefault(key, set())
        index = next_free.get(key, 0)
        while index in taken:
            index += 1
        taken.add(index)
        next_free[key] = index + 1
        result.append(index)
    return result


def _document(data: Any, path: Path) -> Mapping[str, Any]:
    """The top-level mapping (a bare list is read as ``hosts``; an empty file as no hosts)."""
    if isinstance(data, list):
        return {"hosts": data}
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise InventoryError([Problem(str(path), f"must be a mapping with `hosts:`, got {type(data).__name__}",
                                      FIX_SHAPE)])
    return data


def _top_problems(data: Mapping[str, Any], name: str) -> list[Problem]:
    problems = []
    for key in sorted(set(data) - TOP_KEYS, key=str):
        fix = CONNECT_FIX if key == "connect" else f"use only {', '.join(sorted(TOP_KEYS))}"
        problems.append(Problem(f"{name}.{key}", "unknown top-level key", fix))
    cluster_name = data.get("cluster_name")
    if cluster_name is not None:
        problems += filter(None, [name_problem("cluster", cluster_name, f"{name}.cluster_name")])
    return problems


def _defaults(data: Mapping[str, Any], name: str) -> tuple[Mapping[str, Any], list[Problem]]:
    defaults = data.get("defaults") or {}
    if not isinstance(defaults, Mapping):
        return {}, [Problem(f"{name}.defaults", "must be a mapping", FIX_SHAPE)]
    return defaults, [Problem(f"{name}.defaults.{key}", "unknown key", f"use only {', '.join(sorted(DEFAULT_KEYS))}")
                      for key in sorted(set(defaults) - DEFAULT_KEYS, key=str)]


def _entries(data: Mapping[str, Any], name: str) -> tuple[list[Mapping[str, Any]], list[str], list[Problem]]:
    """The host entries that are mappings, their labels, and the problems of the list and of each entry's keys."""
    raw_hosts = data.get("hosts")
    if raw_hosts is None:
        raw_hosts = []
    if not isinstance(raw_hosts, list):
        return [], [], [Problem(f"{name}.hosts", f"must be a list, got {type(raw_hosts).__name__}", FIX_SHAPE)]
    entries: list[Mapping[str, Any]] = []
    labels: list[str] = []
    problems: list[Problem] = []
    for i, entry in enumerate(raw_hosts):
        if not isinstance(entry, Mapping):
            problems.append(Problem(f"hosts[{i}]", f"must be a mapping of host fields, got {type(entry).__name__}",
                                    FIX_SHAPE))
            continue
        label = host_label(f"hosts[{i}]", entry.get("name"), entry.get("address"))
        problems += [Problem(f"{label}.{key}", "unknown field", f"use only {', '.join(sorted(HOST_KEYS))}")
                     for key in sorted(set(entry) - HOST_KEYS, key=str)]
        entries.append(entry)
        labels.append(label)
    return entries, labels, problems


def static_hosts(data: Any, path: Path, default_port: int) -> SourceResult:
    """HostSpecs from a parsed host file; problems with its shape are collected, not raised one by one."""
    doc = _document(data, path)
    defaults, problems = _defaults(doc, path.name)
    problems += _top_problems(doc, path.name)
    bastion, bastion_problems = parse_bastion(f"{path.name}.bastion", doc.get("bastion"), with_keys=True)
    entries, labels, entry_problems = _entries(doc, path.name)
    problems += bastion_problems + entry_problems
    specs = []
    for entry, label, index in zip(entries, labels, _assign_indices(entries), strict=True):
        def get(key: str, default: object = None, entry: Mapping[str, Any] = entry) -> object:
            return entry[key] if key in entry else defaults.get(key, default)
        specs.append(HostSpec(
            label=label, name=entry.get("name"), task_type=entry.get("task_type", WORKER), task_index=index,
            address=entry.get("address"), tf_address=entry.get("tf_address"), port=get("port", default_port),
            gpus=get("gpus", 0), connection="ssh", ssh_user=get("ssh_user"), ssh_port=get("ssh_port"),
            host_keys=entry.get("host_keys")))
    cluster_name = doc.get("cluster_name")
    return SourceResult(specs=tuple(specs), problems=tuple(problems),
                        cluster_name=cluster_name if isinstance(cluster_name, str) else None,
                        access=Access(mode="bastion", bastion=bastion) if bastion else DIRECT,
                        empty_fix=f"list the hosts under `hosts:` in {path}")


def fetch_static(path: Path, default_port: int) -> SourceResult:
    return static_hosts(load_host_file(path), path, default_port)
