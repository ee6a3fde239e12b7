"""Filters of the tf_job role: TF_CONFIG, the chief, the slot check, the collective, the job's environment, systemd
quoting, argument lists.

They run on the control machine and hold no rule of their own: slots, addresses, the chief and the strategies are
tfcluster/core/contract.py's; this file only builds the cluster from the hosts' slots and maps each problem back to the
host that holds the slot (table tests: tests/unit/playbooks/test_job_filters.py).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from ansible.errors import AnsibleFilterError

from tfcluster.core import contract

DOCUMENTATION = r"""
name: job
short_description: Filters of the tf_job role
description:
  - C(tf_config(cluster_spec, task_type, task_index, strategy='auto')) - a host's TF_CONFIG JSON built from the
    cluster spec and its slot (contract.tf_config_json); '' under the mirrored and tpu strategies.
  - C(chief_host(hostvars, hosts)) - the inventory name of the chief (contract.chief_of) from the hosts' slots.
  - C(slot_problems(hostvars, hosts, strategy='auto')) - every problem of the hosts' slots and addresses, each as
    "HOST - MESSAGE. Fix - FIX" (contract.build_tf_config's rules).
  - C(collective(cluster_spec, strategy, all_gpus)) - nccl for a multi_worker_mirrored job on hosts that all
    declare GPUs, else ring.
  - C(job_env(settings, extra)) - the job's environment under the contract's names.
  - C(systemd_exec(argv)) - an argv as an ExecStart= value (% and $ escaped, quoted per systemd.syntax).
  - C(args(value)) - a list of argument strings; a string (old callers) is split like a shell would split it.
author: tfcluster
"""

SLOT_FIELD = re.compile(r"cluster\.(?P<type>\w+)\[(?P<index>\d+)\]")
_BARE_WORD = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")
_C_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


# --- TF_CONFIG ------------------------------------------------------------------------------------------------------
def tf_config(cluster_spec: Any, task_type: str, task_index: Any, strategy: str = "auto") -> str:
    if not isinstance(cluster_spec, Mapping):
        raise AnsibleFilterError(f"tf_config: the cluster spec must be a mapping, got {type(cluster_spec).__name__}")
    cluster = {str(k): [str(a) for a in v] for k, v in cluster_spec.items()}
    if contract.resolve_strategy(cluster, strategy or "auto") in contract.NO_TF_CONFIG_STRATEGIES:
        return ""
    index = _int(task_index)
    try:
        contract.build_tf_config(cluster, task_type, index, strategy or "auto")
    except contract.TFConfigError as error:
        raise AnsibleFilterError(f"tf_config for {task_type}:{task_index}: {error}") from error
    return contract.tf_config_json(cluster, task_type, index)  # type: ignore[arg-type]


# --- slots ----------------------------------------------------------------------------------------------------------
def _slots(hostvars: Mapping[str, Any], hosts: Sequence[str]) -> tuple[dict[tuple[str, int], str], list[str]]:
    """{(type, index): host} of the hosts' declared slots, and the problems of the declarations themselves."""
    slots: dict[tuple[str, int], str] = {}
    problems: list[str] = []
    for name in hosts:
        hv = hostvars[name]
        task_type, index = hv.get("tfcluster_task_type"), _int(hv.get("tfcluster_task_index"))
        if task_type not in contract.TASK_TYPES:
            problems.append(f"{name}: tfcluster_task_type {task_type!r} is not one of "
                            f"{', '.join(contract.TASK_TYPES)}. Fix: declare the host's slot in the inventory")
        elif index is None or index < 0:
            problems.append(f"{name}: tfcluster_task_index {hv.get('tfcluster_task_index')!r} is not a whole number "
                            "from 0. Fix: declare the slot's index in the inventory")
        elif (task_type, index) in slots:
            problems.append(f"{name}: slot {task_type}:{index} is also held by {slots[(task_type, index)]}. Fix: give "
                            "each host its own slot")
        else:
            slots[(task_type, index)] = name
    return slots, problems


def _cluster(hostvars: Mapping[str, Any], slots: Mapping[tuple[str, int], str]) -> tuple[dict[str, list[Any]],
                                                                                          list[str]]:
    cluster: dict[str, list[Any]] = {}
    problems: list[str] = []
    for task_type in contract.CLUSTER_TASK_TYPES:
        indexes = sorted(i for t, i in slots if t == task_type)
        if indexes and indexes != list(range(len(indexes))):
            problems.append(f"{task_type} indexes {indexes} are not 0..{len(indexes) - 1}. Fix: renumber the "
                            f"{task_type} hosts from 0")
        elif indexes:
            cluster[task_type] = [hostvars[slots[(task_type, i)]].get("tfcluster_address") for i in indexes]
    return cluster, problems


def slot_problems(hostvars: Any, hosts: Any, strategy: str = "auto") -> list[str]:
    names = list(hosts or [])
    if not names:
        return [f"the inventory has no hosts in group {contract.INVENTORY_GROUP}. Fix: give at least one worker "
                "(WORKERS>=1), or check TFCLUSTER_SOURCE and the hosts file"]
    slots, problems = _slots(hostvars, names)
    cluster, more = _cluster(hostvars, slots)
    problems += more
    if problems:
        return problems
    try:
        contract.build_tf_config(cluster, None, None, strategy or "auto", source="the inventory")
    except contract.TFConfigError as error:
        for problem in error.problems:
            match = SLOT_FIELD.fullmatch(problem.field)
            where = slots.get((match["type"], int(match["index"]))) if match else None
            problems.append(f"{where or problem.field}: {problem.message}. Fix: {problem.fix}")
    return problems


def chief_host(hostvars: Any, hosts: Any) -> str:
    slots, _ = _slots(hostvars, list(hosts or []))
    cluster = {t: [i] for t, i in slots}
    return slots.get(contract.chief_of(cluster), "")


def collective(cluster_spec: Any, strategy: str, all_gpus: Any) -> str:
    resolved = contract.resolve_strategy(dict(cluster_spec or {}), strategy or "auto")
    return "nccl" if resolved == "multi_worker_mirrored" and str(all_gpus).lower() in ("true", "1", "yes") else "ring"


# --- the environment ------------------------------------------------------------------------------------------------
ENV_NAMES = {"tf_config": contract.ENV_TF_CONFIG, "job": contract.ENV_JOB, "model_dir": contract.ENV_MODEL_DIR,
             "task_type": contract.ENV_TASK_TYPE, "task_index": contract.ENV_TASK_INDEX,
             "datasets": contract.ENV_DATASETS, "gpus": contract.ENV_GPUS, "collective": contract.ENV_COLLECTIVE,
             "checkpoint_s3": contract.ENV_CHECKPOINT_S3}


def job_env(settings: Any, extra: Any = None) -> dict[str, str]:
    """The job's environment: the contract's variables (empty ones left out), PYTHONPATH, legacy Keras for a script
    that asks for it, NCCL settings under the nccl collective, then ``extra`` (the user's, last: it wins)."""
    settings = dict(settings or {})
    env: dict[str, str] = {}
    for key, name in ENV_NAMES.items():
        value = settings.get(key)
        if value not in (None, ""):
            env[name] = str(value)
    env["PYTHONPATH"] = str(settings.get("pythonpath") or "")
    env["PYTHONUNBUFFERED"] = "1"
    if settings.get("legacy_keras"):
        env["TF_USE_LEGACY_KERAS"] = "1"
    if settings.get("collective") == "nccl":
        env.update({str(k): str(v) for k, v in (settings.get("nccl") or {}).items() if v not in (None, "")})
    env.update({str(k): str(v) for k, v in dict(extra or {}).items()})
    return env


# --- command lines --------------------------------------------------------------------------------------------------
def systemd_word(arg: str) -> str:
    """One argument for ExecStart=: specifiers (%) and variables ($) doubled, quoted unless a plain word."""
    text = str(arg).replace("%", "%%").replace("$", "$$")
    if _BARE_WORD.fullmatch(text):
        return text
    quoted = "".join(_C_ESCAPES.get(c, f"\\x{ord(c):02x}" if ord(c) < 0x20 or ord(c) == 0x7F else c) for c in text)
    return f'"{quoted}"'


def systemd_exec(argv: Any) -> str:
    words = [str(a) for a in (argv or [])]
    if not words or not words[0].startswith("/"):
        raise AnsibleFilterError(f"systemd_exec: the program must be an absolute path, got {words[:1]!r}")
    return " ".join(systemd_word(w) for w in words)


def args(value: Any) -> list[str]:
    if value is None or value == "":
        return []
    if isinstance(value, str):
        try:
            return shlex.split(value)
        except ValueError as error:
            raise AnsibleFilterError(f"arguments {value[:200]!r} cannot be split ({error}). Fix: pass them as a "
                                     "list of strings") from error
    if isinstance(value, Sequence):
        return [str(v) for v in value]
    raise AnsibleFilterError(f"arguments must be a list of strings, got {type(value).__name__}")


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"tf_config": tf_config, "chief_host": chief_host, "slot_problems": slot_problems,
                "collective": collective, "job_env": job_env, "systemd_exec": systemd_exec,
                "args": args}
