#!/usr/bin/python
"""tfcluster.cluster.job_preflight: every check before a job's task starts on this host, in one module run."""

from __future__ import annotations

DOCUMENTATION = r"""
module: job_preflight
short_description: Check a host before a tfcluster job's task starts
description:
  - Reads the job's state here (C(state), C(done)) and the facts the job's rendering needs (C(systemd),
    C(default_interface)), then checks - the training port is free (skipped while the task runs), the runtime
    imports the job's modules, the deployed release has the expected digest, the listed files exist with their
    sha256, and TensorFlow lists exactly C(gpus) GPUs and runs a small op on each as the job's user under the
    unit's sandbox (C(systemd-run)); with EFA (C(efa)) the sandbox gets C(sandbox.efa_properties) too.
  - Fails listing every problem; C(problems) holds them one by one. Starts and changes nothing, except a stamp
    under C(stamp_dir) that remembers a passed import or GPU check for as long as its inputs stay the same.
  - In check mode a release or runtime that is not there yet (a dry run on a fresh host) is not a problem.
author: tfcluster (@tfcluster)
version_added: "1.0.0"
options:
  job:
    description: Where the job lives here - C(model_dir), C(run_dir), C(log) and C(unit) (read when systemd is the
      service manager here).
    type: dict
    required: true
  address:
    description: The task's training address (C(host:port), C([v6]:port)); '' skips the port check.
    type: str
    default: ""
  python:
    description: The runtime's interpreter.
    type: path
  imports:
    description: Modules the runtime must import.
    type: list
    elements: str
    default: []
  release_dir:
    description: The deployed trainer release (its digest is returned).
    type: path
  digest:
    description: The digest the release must have ('' - any).
    type: str
    default: ""
  files:
    description: Files that must exist, with their sha256 ('' - any content).
    type: dict
    default: {}
  gpus:
    description: GPUs the job declares here; TensorFlow must list exactly these.
    type: int
    default: 0
  sandbox:
    description: The job's user, group and the unit's sandbox properties for the GPU check (C(systemd-run -p)),
      and C(efa_properties), added where EFA is used. Without a user, or without systemd, the check runs as the
      module's user.
    type: dict
    default: {}
  efa:
    description: EFA in the job - C(auto) (where C(/dev/infiniband/uverbs*) exists), C(true) or C(false).
    type: str
    default: auto
  efa_plugin_dirs:
    description: Where the aws-ofi-nccl plugin may lie; the first that exists is returned.
    type: list
    elements: path
    default: []
  stamp_dir:
    description: Where passed import and GPU checks are remembered ('' - never).
    type: path
    default: ""
  timeout:
    description: Seconds an import or GPU check may take.
    type: int
    default: 300
extends_documentation_fragment:
  - tfcluster.cluster.attributes
  - tfcluster.cluster.attributes.info_module
"""

EXAMPLES = r"""
- name: Check this host before the job starts
  tfcluster.cluster.job_preflight:
    job: {model_dir: /var/lib/tfcluster/mnist, run_dir: /run/tfcluster/mnist, log: /var/log/tfcluster/mnist.log,
          unit: tfcluster-mnist.service}
    address: "[fd00::5]:2222"
    python: /opt/tfcluster/venv/bin/python
    imports: [tensorflow]
    release_dir: /opt/tfcluster/trainer/current
    stamp_dir: /run/tfcluster/preflight
"""

RETURN = r"""
state:
  description: The job's task state here (inactive when it never ran).
  returned: always
  type: str
done:
  description: The model dir holds DONE.
  returned: always
  type: bool
digest:
  description: The release's digest (null when not checked).
  returned: always
  type: str
systemd:
  description: systemd is this host's service manager.
  returned: always
  type: bool
default_interface:
  description: The interface of the default IPv4 route (null when none).
  returned: always
  type: str
gpus_seen:
  description: GPUs TensorFlow listed (null when not checked).
  returned: always
  type: int
efa:
  description: "C({enabled, devices, plugin_dir}): EFA's uverbs nodes here and the aws-ofi-nccl plugin dir."
  returned: always
  type: dict
problems:
  description: Every problem found, each naming what and the fix.
  returned: always
  type: list
remembered:
  description: Checks not repeated because a stamp proved their inputs unchanged.
  returned: always
  type: list
"""

import os
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.tfcluster.cluster.plugins.module_utils.host.jobspec import ACTIVE_STATES, INACTIVE
from ansible_collections.tfcluster.cluster.plugins.module_utils.host.jobstatus import (
    last_exit_state,
    model_dir_facts,
    process_status,
    read_last_exit,
    systemd_state,
    unit_props,
)
from ansible_collections.tfcluster.cluster.plugins.module_utils.host.preflight import (
    boot_id,
    default_interface,
    digest_problem,
    efa_facts,
    file_problems,
    gpu_check_argv,
    gpu_problem,
    import_problem,
    port_problem,
    remember,
    remembered,
    runtime_fingerprint,
    systemd_booted,
)


def job_state(job: dict[str, Any]) -> str:
    if job.get("unit") and systemd_booted():
        state = systemd_state(unit_props(job["unit"]))
        if state == INACTIVE and job.get("run_dir"):
            state = last_exit_state(read_last_exit(job["run_dir"]))[0]
        return state
    return process_status({"run_dir": job.get("run_dir") or "/nonexistent", "log": job.get("log") or ""}, 0)["state"]


class Checks:
    def __init__(self, module: AnsibleModule) -> None:
        self.p = module.params
        self.check_mode = module.check_mode
        self.problems: list[str] = []
        self.remembered: list[str] = []
        self.stamps = self.p["stamp_dir"] if not module.check_mode else ""

    def absent(self, path: str | None) -> bool:
        """A dry run on a fresh host: what site.yml would install is not there yet."""
        return self.check_mode and not (path and os.path.exists(path))

    def once(self, kind: str, key: Any, check: Any) -> Any:
        """Run ``check`` (returns (value, problem)) unless a stamp for ``key`` says it passed."""
        if self.p["stamp_dir"] and remembered(self.p["stamp_dir"], kind, key):
            self.remembered.append(kind)
            return None
        value, problem = check()
        if problem:
            self.problems.append(problem)
        elif self.stamps:
            os.makedirs(self.stamps, mode=0o755, exist_ok=True)
            remember(self.stamps, kind, key)
        return value

    def imports(self) -> None:
        python, modules = self.p["python"], self.p["imports"]
        if not modules or not python or self.absent(python):
            return
        key = [*runtime_fingerprint(python), *modules]
        self.once("imports", key, lambda: (None, import_problem(python, modules, self.p["timeout"])))

    def release(self) -> str | None:
        if not self.p["release_dir"] or self.absent(self.p["release_dir"]):
            return None
        digest, problem = digest_problem(self.p["release_dir"], self.p["digest"])
        if problem:
            self.problems.append(problem)
        return digest

    def gpus(self, efa: bool) -> int | None:
        count, python, sandbox = self.p["gpus"], self.p["python"], self.p["sandbox"] or {}
        if count <= 0 or not python or self.absent(python):
            return None
        user = sandbox.get("user") if systemd_booted() else None  # no systemd: the process backend's own way
        properties = [*(sandbox.get("properties") or []), *((sandbox.get("efa_properties") or []) if efa else [])]
        argv = gpu_check_argv(python, user, sandbox.get("group"), properties)
        driver = ""
        if os.path.exists("/proc/driver/nvidia/version"):
            with open("/proc/driver/nvidia/version", encoding="utf-8", errors="replace") as handle:
                driver = handle.read()
        key = [*runtime_fingerprint(python), count, argv, boot_id(), driver]
        return self.once("gpus", key, lambda: gpu_problem(argv, count, self.p["timeout"]))


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "job": {"type": "dict", "required": True},
            "address": {"type": "str", "default": ""},
            "python": {"type": "path"},
            "imports": {"type": "list", "elements": "str", "default": []},
            "release_dir": {"type": "path"},
            "digest": {"type": "str", "default": ""},
            "files": {"type": "dict", "default": {}},
            "gpus": {"type": "int", "default": 0},
            "sandbox": {"type": "dict", "default": {}},
            "efa": {"type": "str", "default": "auto"},
            "efa_plugin_dirs": {"type": "list", "elements": "path", "default": []},
            "stamp_dir": {"type": "path", "default": ""},
            "timeout": {"type": "int", "default": 300},
        },
        supports_check_mode=True,
    )
    job = module.params["job"]
    state = job_state(job)
    checks = Checks(module)
    if module.params["address"] and state not in ACTIVE_STATES:
        problem = port_problem(module.params["address"])
        checks.problems += [problem] if problem else []
    digest = checks.release()
    files = {str(k): str(v or "") for k, v in module.params["files"].items() if not checks.absent(str(k))}
    checks.problems += file_problems(files)
    checks.imports()
    efa = efa_facts(module.params["efa"], module.params["efa_plugin_dirs"])
    efa["enabled"] = bool(efa["enabled"] and module.params["gpus"] > 0)  # EFA serves NCCL: GPU units only
    gpus_seen = checks.gpus(efa["enabled"])
    result = {"changed": False, "state": state, "done": model_dir_facts(job.get("model_dir") or "/nonexistent")["done"],
              "digest": digest, "systemd": systemd_booted(), "default_interface": default_interface(),
              "gpus_seen": gpus_seen, "efa": efa, "problems": checks.problems, "remembered": checks.remembered}
    if checks.problems:
        module.fail_json(msg="; ".join(checks.problems), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
