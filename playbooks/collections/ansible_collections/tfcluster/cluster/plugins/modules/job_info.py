#!/usr/bin/python
"""tfcluster.cluster.job_info: a job's task status on this host (systemd unit or supervised process)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: job_info
short_description: A tfcluster job's task status on this host
description:
  - Reads the task's state (C(inactive), C(running), C(restarting), C(succeeded), C(preempted), C(failed),
    C(stopped), C(lost), C(timeout)), exit code, restarts, the model dir's facts (C(DONE), the program's
    C(status.json)) and the last log lines - of the systemd unit, or of the process backend's supervisor.
  - Read-only. The same data as C(python3 -m tfcluster.host.jobstatus status SPEC) (what the wait loop polls).
  - The job's files are read without following a symlink and never block on a FIFO; C(status.json) is read up to
    1 MiB, the log's last 64 KiB.
author: tfcluster (@tfcluster)
version_added: "1.0.0"
options:
  spec:
    description: Path of the job spec (C(<env dir>/<job>.json)).
    type: path
    required: true
  unit:
    description: The systemd unit (default - the spec's; none - the process backend).
    type: str
  lines:
    description: Log lines to return (default - the spec's C(log_tail_lines)).
    type: int
extends_documentation_fragment:
  - tfcluster.cluster.attributes
  - tfcluster.cluster.attributes.info_module
"""

EXAMPLES = r"""
- name: Read the task's status
  tfcluster.cluster.job_info:
    spec: /etc/tfcluster/mnist.json
    lines: 50
  register: task
"""

RETURN = r"""
status:
  description: state, exit_code, signal, restarts, pid, started_at, log_mtime, log_tail, done, progress,
    progress_mtime, progress_error (why status.json was not read - a symlink, a FIFO, over 1 MiB - or null),
    model_dir, name, max_duration, now (and unit for the systemd backend).
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.tfcluster.cluster.plugins.module_utils.host.jobstatus import status


def main() -> None:
    module = AnsibleModule(
        argument_spec={"spec": {"type": "path", "required": True}, "unit": {"type": "str"},
                       "lines": {"type": "int"}},
        supports_check_mode=True,
    )
    try:
        result = status(module.params["spec"], module.params["unit"], module.params["lines"])
    except ValueError as error:  # JobError (of either copy: see jobspec.JobError)
        module.fail_json(msg=str(error))
    module.exit_json(changed=False, status=result)


if __name__ == "__main__":
    main()
