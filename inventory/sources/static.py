"""static source (on-prem): a YAML host file, e.g. inventory/onprem.example.yml.

Format::

    cluster_name: lab            # optional (TFCLUSTER_CLUSTER wins; default "onprem")
    defaults:                    # optional, applied to every host that leaves the field out
      ssh_user: ubuntu
      ssh_port: 22
      port: 22220                # training port (default TFCLUSTER_BASE_PORT)
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

A top-level list is read as ``hosts``. A file named ``*.json`` is read as JSON (same structure; much faster to
parse for thousands of hosts).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from inventory.model import HostSpec, InventoryError, SourceResult, is_int
from tfcluster.contract import Problem

HOST_KEYS = frozenset({"name", "address", "tf_address", "task_type", "task_index", "port", "gpus", "ssh_user",
                       "ssh_port"})
DEFAULT_KEYS = frozenset({"port", "gpus", "ssh_user", "ssh_port"})
TOP_KEYS = frozenset({"cluster_name", "defaults", "hosts"})


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
    task_type = entry.get("task_type", "worker")
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


def static_hosts(data: Any, path: Path, default_port: int) -> SourceResult:
    """HostSpecs from a parsed host file; problems with its shape are collected, not raised one by one."""
    problems: list[Problem] = []
    fix_shape = "see inventory/onprem.example.yml for the format"
    if isinstance(data, list):
        data = {"hosts": data}
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise InventoryError([Problem(str(path), f"must be a mapping with `hosts:`, got {type(data).__name__}",
                                      fix_shape)])
    for key in sorted(set(data) - TOP_KEYS, key=str):
        problems.append(Problem(f"{path.name}.{key}", "unknown top-level key",
                                f"use only {', '.join(sorted(TOP_KEYS))}"))
    defaults = data.get("defaults") or {}
    if not isinstance(defaults, Mapping):
        problems.append(Problem(f"{path.name}.defaults", "must be a mapping", fix_shape))
        defaults = {}
    for key in sorted(set(defaults) - DEFAULT_KEYS, key=str):
        problems.append(Problem(f"{path.name}.defaults.{key}", "unknown key",
                                f"use only {', '.join(sorted(DEFAULT_KEYS))}"))
    cluster_name = data.get("cluster_name")
    if cluster_name is not None and not (isinstance(cluster_name, str) and cluster_name.strip()):
        problems.append(Problem(f"{path.name}.cluster_name", f"{cluster_name!r} is not a name",
                                "give a short name, e.g. cluster_name: lab"))
        cluster_name = None
    raw_hosts = data.get("hosts")
    if raw_hosts is None:
        raw_hosts = []
    if not isinstance(raw_hosts, list):
        problems.append(Problem(f"{path.name}.hosts", f"must be a list, got {type(raw_hosts).__name__}", fix_shape))
        raw_hosts = []
    entries: list[Mapping[str, Any]] = []
    labels: list[str] = []
    for i, entry in enumerate(raw_hosts):
        if not isinstance(entry, Mapping):
            problems.append(Problem(f"hosts[{i}]", f"must be a mapping of host fields, got {type(entry).__name__}",
                                    fix_shape))
            continue
        ident = entry.get("name") or entry.get("address")
        label = f"hosts[{i}] ({ident})" if ident else f"hosts[{i}]"
        for key in sorted(set(entry) - HOST_KEYS, key=str):
            problems.append(Problem(f"{label}.{key}", "unknown field", f"use only {', '.join(sorted(HOST_KEYS))}"))
        entries.append(entry)
        labels.append(label)
    indices = _assign_indices(entries)
    specs = []
    for entry, label, index in zip(entries, labels, indices, strict=True):
        def get(key: str, default: object = None, entry: Mapping[str, Any] = entry) -> object:
            return entry[key] if key in entry else defaults.get(key, default)
        specs.append(HostSpec(
            label=label, name=entry.get("name"), task_type=entry.get("task_type", "worker"), task_index=index,
            address=entry.get("address"), tf_address=entry.get("tf_address"), port=get("port", default_port),
            gpus=get("gpus", 0), connection="ssh", ssh_user=get("ssh_user"), ssh_port=get("ssh_port")))
    return SourceResult(specs=tuple(specs), problems=tuple(problems),
                        cluster_name=cluster_name.strip() if isinstance(cluster_name, str) else None,
                        empty_fix=f"list the hosts under `hosts:` in {path}")


def fetch_static(path: Path, default_port: int) -> SourceResult:
    return static_hosts(load_host_file(path), path, default_port)
