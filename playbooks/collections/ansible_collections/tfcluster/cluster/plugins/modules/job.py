#!/usr/bin/python
"""tfcluster.cluster.job: render a job's files on a host; start, stop or finalize its task (process backend)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: job
short_description: Render a tfcluster job's files; start, stop or finalize its task (process backend)
description:
  - C(rendered) writes the job's directories, its environment file and spec (mode 0640, owner root, the job's
    group - the job's user reads them, nobody else) and, for the systemd backend, its unit. A file is rewritten only
    when its content or mode differs; C(unit_changed) says whether systemd must reload.
  - With C(home) it also makes the job's own home as the job user (its cache directories, and the Keras dataset
    cache filled from the host's verified datasets where the file is the one Keras accepts) and the S3 dataset cache
    C(<datasets>/s3) owned by the job user (C(tfcluster.host.jobhome)); C(notes) says which datasets Keras would
    download.
  - For the process backend (no C(unit)) it also creates the task's log file, empty, mode 0640, owner root, the
    job's group (the supervisor appends to it), or sets an existing log's mode and group - never its content, never
    through a symlink. The systemd backend logs to the journal.
  - A spec with C(netns_dir) (local slots) is refused before anything is written when no private network namespace
    can be made here (one throwaway namespace is tried, not in check mode) and C(allow_shared_network) is not true;
    C(started) refuses the same way and launches nothing.
  - C(started) starts the task as a supervised background process (hosts without systemd, local slots) unless its
    supervisor runs already; run as root, the supervisor drops the task to the spec's user.
  - C(stopped) sends SIGTERM (SIGKILL after the spec's stop_timeout); a no-op when nothing runs.
  - C(finalized) writes C(MANIFEST.sha256) (maybe empty) and then C(DONE) in the model dir of a script that wrote
    no C(DONE), after fsyncing its files; a no-op when C(DONE) exists. Both backends.
author: tfcluster (@tfcluster)
version_added: "1.0.0"
options:
  spec:
    description: Path of the job spec (C(<env dir>/<job>.json)).
    type: path
    required: true
  state:
    description: What to do.
    type: str
    choices: [rendered, started, stopped, finalized]
    default: started
  spec_data:
    description: The spec (C(rendered)); its C(env_file), C(run_dir), C(log) and C(model_dir) are created too.
    type: dict
  env:
    description: The job's environment (C(rendered)), written in systemd's EnvironmentFile= syntax.
    type: dict
  unit:
    description: The unit's text (C(rendered), systemd backend).
    type: str
  unit_path:
    description: Where the unit goes (C(rendered), with C(unit)).
    type: path
  group:
    description: Group of the environment file and spec (root only; a local slot keeps yours).
    type: str
  header:
    description: Comment lines at the top of the environment file.
    type: str
    default: ""
  home:
    description: The job's home (C(rendered), real hosts) - C(path), C(datasets_dir) (the host's dataset dir, where
      C(s3) is made) and C(keras_datasets) (dataset names whose file goes into the Keras cache). Made as the spec's
      C(user).
    type: dict
extends_documentation_fragment:
  - tfcluster.cluster.attributes
  - tfcluster.cluster.attributes.changes
"""

EXAMPLES = r"""
- name: Start the task (process backend)
  tfcluster.cluster.job:
    spec: /etc/tfcluster/mnist.json
    state: started

- name: Write the manifest and DONE for a script that did not
  tfcluster.cluster.job:
    spec: /etc/tfcluster/mnist.json
    state: finalized
"""

RETURN = r"""
state:
  description: The task's state after the action (started/stopped).
  returned: when state is started or stopped
  type: str
unit_changed:
  description: The unit file was written (systemd must reload).
  returned: when state is rendered
  type: bool
notes:
  description: Datasets whose file Keras would not accept from its cache (it would download them).
  returned: when state is rendered
  type: list
files:
  description: Files the manifest lists (finalized; null when nothing was written).
  returned: when state is finalized
  type: int
"""

import grp
import json
import os
import stat
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.tfcluster.cluster.plugins.module_utils.core.files import atomic_write_text
from ansible_collections.tfcluster.cluster.plugins.module_utils.host.jobhome import prepare as prepare_home
from ansible_collections.tfcluster.cluster.plugins.module_utils.host.jobspec import render_env_file
from ansible_collections.tfcluster.cluster.plugins.module_utils.host.supervisor import (
    finalize,
    refuse_shared_network,
    start,
    stop,
)
from ansible_collections.tfcluster.cluster.plugins.module_utils.host.tfthreads import usable_cpus, with_interop_floor

LOG_MODE = 0o640  # the task's log: root writes it (the supervisor), the job's group reads it, nobody else


def _gid(group: str) -> int:
    """A group by name, or by number (a gid the host may not name); KeyError when there is no such group."""
    if group.isascii() and group.isdigit():
        return int(group)
    return grp.getgrnam(group).gr_gid


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        return None


class Renderer:
    """Writes what differs; collects the diff."""

    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        self.root = os.geteuid() == 0
        self.changed: list[str] = []
        self.diff: list[dict[str, str]] = []

    def directory(self, path: str, mode: int, owner: str | None = None, group: str | None = None) -> None:
        if not os.path.isdir(path):
            self.changed.append(path)
            self.diff.append({"before_header": path, "after_header": path, "before": "absent\n",
                              "after": "directory\n"})
            if self.module.check_mode:
                return
            os.makedirs(path, mode=mode, exist_ok=True)
        elif (os.stat(path).st_mode & 0o7777) != mode:
            self.changed.append(path)
        if not self.module.check_mode and os.path.isdir(path):
            os.chmod(path, mode)
            if self.root and owner:
                self.module.set_owner_if_different(path, owner, False)
                self.module.set_group_if_different(path, group or owner, False)

    def log_file(self, path: str, group: str | None = None) -> None:
        """The process backend's log: created empty (LOG_MODE, the job's group), else its mode and group set; its
        content is never touched and no symlink is followed."""
        try:
            info: os.stat_result | None = os.lstat(path)
        except FileNotFoundError:
            info = None
        if info is not None and not stat.S_ISREG(info.st_mode):
            self.module.fail_json(msg=f"{path} (the job's log) is not a regular file (a symlink, a FIFO or a "
                                      "directory). Fix: remove it; the job module creates the log")
        try:
            gid = _gid(group) if self.root and group else -1
        except KeyError:
            if self.module.check_mode:  # a dry run on a fresh host: the trainer role would create the group first
                self.changed.append(path)
                return
            self.module.fail_json(msg=f"group {group} does not exist on this host. Fix: run site.yml (the trainer "
                                      "role creates it)")
        if info is not None and stat.S_IMODE(info.st_mode) == LOG_MODE and gid in (-1, info.st_gid):
            return
        self.changed.append(path)
        self.diff.append({"before_header": path, "after_header": path,
                          "before": "absent\n" if info is None else f"mode {stat.S_IMODE(info.st_mode):04o}\n",
                          "after": f"mode {LOG_MODE:04o}" + (f", group {group}" if gid != -1 else "") + "\n"})
        if self.module.check_mode:
            return
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     LOG_MODE)
        try:
            os.fchmod(fd, LOG_MODE)
            if gid != -1:
                os.fchown(fd, -1, gid)
        finally:
            os.close(fd)

    def file(self, path: str, text: str, mode: int, group: str | None = None) -> bool:
        before = _read(path)
        same_mode = before is not None and (os.stat(path).st_mode & 0o7777) == mode
        if before == text and same_mode:
            return False
        self.changed.append(path)
        self.diff.append({"before_header": path, "after_header": path, "before": before or "", "after": text})
        if not self.module.check_mode:
            atomic_write_text(path, text, mode)
            if self.root and group:
                self.module.set_group_if_different(path, group, False)
        return True


def render(module: AnsibleModule) -> dict[str, Any]:
    params = module.params
    data = params["spec_data"] or {}
    missing = [key for key in ("env_file", "run_dir", "log", "model_dir") if not data.get(key)]
    if missing or params["env"] is None:
        module.fail_json(msg="state=rendered needs spec_data (with {}) and env".format(", ".join(missing) or "all"))
    if not module.check_mode:  # local slots without a private network namespace: refused before any slot starts
        refuse_shared_network(data)
    group = params["group"] if os.geteuid() == 0 else None
    out = Renderer(module)
    for path in {os.path.dirname(params["spec"]), os.path.dirname(data["env_file"]), data["run_dir"],
                 os.path.dirname(data["log"])}:
        out.directory(path, 0o755)
    out.directory(data["model_dir"], 0o750, data.get("user"), data.get("group"))
    try:
        # The task's CPUs as it will run (pinned, or this host's): on one, the inter-op floor (host/tfthreads.py).
        env = with_interop_floor(params["env"], usable_cpus(data.get("cpu_affinity") or ()))
        env_text = render_env_file(env, params["header"])
    except ValueError as error:  # JobError (of either copy: see jobspec.JobError)
        module.fail_json(msg=str(error))
    out.file(data["env_file"], env_text, 0o640, group)
    out.file(params["spec"], json.dumps(data, indent=2, sort_keys=True) + "\n", 0o640, group)
    unit_changed = bool(params["unit"]) and out.file(params["unit_path"], params["unit"], 0o644)
    if not params["unit"]:  # the process backend writes this log; a unit's output goes to the journal
        out.log_file(data["log"], group)
    notes: list[str] = []
    if params["home"]:
        home = params["home"]
        made = prepare_home(str(home["path"]), str(home["datasets_dir"]), list(home.get("keras_datasets") or []),
                            data.get("user"), data.get("group"), check=module.check_mode)
        if made["changed"]:
            out.changed.append(str(home["path"]))
        notes = made["notes"]
    return {"changed": bool(out.changed), "unit_changed": unit_changed, "written": out.changed, "notes": notes,
            "diff": out.diff if module._diff else []}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "spec": {"type": "path", "required": True},
            "state": {"type": "str", "choices": ["rendered", "started", "stopped", "finalized"],
                      "default": "started"},
            "spec_data": {"type": "dict"},
            "env": {"type": "dict"},
            "unit": {"type": "str"},
            "unit_path": {"type": "path"},
            "group": {"type": "str"},
            "header": {"type": "str", "default": ""},
            "home": {"type": "dict"},
        },
        required_if=[("state", "rendered", ("spec_data", "env"))],
        required_together=[("unit", "unit_path")],
        supports_check_mode=True,
    )
    state, spec = module.params["state"], module.params["spec"]
    try:
        if state == "rendered":
            result = render(module)
        elif state == "started":
            result = start(spec, check=module.check_mode)
        elif state == "stopped":
            result = stop(spec, check=module.check_mode) if os.path.isfile(spec) else {
                "changed": False, "state": None, "msg": f"{spec} is missing: the job was never rendered here"}
        else:
            result = finalize(_model_dir(module, spec), check=module.check_mode)
    except (ValueError, OSError) as error:  # JobError (of either copy: see jobspec.JobError)
        module.fail_json(msg=str(error))
    module.exit_json(**result)


def _model_dir(module: AnsibleModule, spec: str) -> str:
    try:
        with open(spec, encoding="utf-8") as handle:
            return str(json.load(handle)["model_dir"])
    except (OSError, ValueError, KeyError) as error:
        module.fail_json(msg=f"job spec {spec} cannot be read ({error}). Fix: render the job (train.yml)")
        raise


if __name__ == "__main__":
    main()
