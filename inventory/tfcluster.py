#!/usr/bin/env python3
"""tfcluster dynamic inventory: every host gets a stable TensorFlow task type and index from a declared slot.

Usage (Ansible's inventory-script interface; exactly one of the three options)::

    inventory/tfcluster.py --list              # whole inventory as JSON, always with _meta.hostvars
    inventory/tfcluster.py --host HOST         # one host's variables as JSON
    inventory/tfcluster.py --tf-config all     # plan view: `HOST TF_CONFIG='<json>'` per host, contacts no host
    inventory/tfcluster.py --tf-config HOST    # that host's TF_CONFIG JSON only ('' for mirrored/tpu)

    ansible-inventory -i inventory/tfcluster.py --graph
    TFCLUSTER_SOURCE=local TFCLUSTER_WORKERS=3 ansible-playbook -i inventory/tfcluster.py playbooks/train.yml

Environment variables:

    TFCLUSTER_SOURCE     terraform (default) | static | aws | local — where hosts come from:
                         terraform: the `hosts` output of TFCLUSTER_TF_DIR, read with python-terraform and the
                                    `terraform` on PATH (or next to the running Python);
                         static:    the YAML host file TFCLUSTER_HOSTS_FILE (inventory/onprem.example.yml);
                         aws:       running EC2 instances tagged tfcluster:cluster=TFCLUSTER_CLUSTER, slot from the
                                    tags tfcluster:task_type / tfcluster:task_index (optional tfcluster:port,
                                    tfcluster:gpus, tfcluster:ssh_user);
                         local:     TFCLUSTER_WORKERS processes on 127.0.0.1, ansible_connection=local.
    TFCLUSTER_TF_DIR     Terraform root module for the terraform source (default: infra/aws of this repository;
                         a relative value is relative to the current directory).
    TFCLUSTER_HOSTS_FILE YAML host file for the static source (required there).
    TFCLUSTER_CLUSTER    cluster name: the tfcluster:cluster tag value (required for aws) and the group var
                         tfcluster_cluster_name (default: Terraform's cluster_name output, the host file's
                         cluster_name, "local" for local, "onprem" for static).
    TFCLUSTER_WORKERS    local source: number of workers (default 2; parameter_server adds a chief and a ps).
    TFCLUSTER_STRATEGY   auto (default) | multi_worker_mirrored | parameter_server | mirrored | tpu. auto picks
                         parameter_server when there is a ps, else multi_worker_mirrored.
    TFCLUSTER_BASE_PORT  training port (default 22220, as infra/local). local source: slot i (chief, ps, then
                         workers) listens on TFCLUSTER_BASE_PORT + i. static/aws/terraform: the port of hosts that
                         state none.
    AWS_REGION, AWS_DEFAULT_REGION, AWS_PROFILE, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL(_EC2)
                         the aws source's usual boto3 settings.

Output: groups tfcluster (every host; group vars tfcluster_cluster_spec, tfcluster_strategy,
tfcluster_cluster_name), chief, worker, ps, evaluator (always present, maybe empty); host vars ansible_host,
ansible_connection, ansible_user (when known), ansible_port (static ssh_port, when given), tfcluster_task_type,
tfcluster_task_index, tfcluster_port, tfcluster_address, tfcluster_gpus, tfcluster_tf_config. Keys are sorted and
host lists are in slot order (chief, ps, worker, evaluator; then index), so the output is deterministic.

Exit codes: 0 printed; 1 the inventory is invalid — every problem is listed on stderr as
"FIELD: MESSAGE. Fix: FIX" and nothing is printed on stdout; 2 bad command-line arguments.
"""

from __future__ import annotations

import sys


def main() -> int:
    try:
        from inventory.cli import main as cli_main
    except ModuleNotFoundError as exc:  # run by a Python that does not have the project installed
        print(f"tfcluster inventory: cannot import {exc.name!r} with {sys.executable}. Fix: `make setup` (it installs "
              "the project into .venv), then run with .venv/bin first on PATH\nNo inventory was printed.",
              file=sys.stderr)
        return 1
    return cli_main()


if __name__ == "__main__":
    sys.exit(main())
