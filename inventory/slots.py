#!/usr/bin/env python3
"""tfcluster dynamic inventory: every host gets a stable TensorFlow task type and index from a declared slot.

Usage (Ansible's inventory-script interface; exactly one option)::

    inventory/slots.py --list              # whole inventory as compact JSON, always with _meta.hostvars
    inventory/slots.py --host HOST         # one host's variables as JSON
    inventory/slots.py --tf-config all     # plan view: `HOST TF_CONFIG='<json>'` per host, contacts no host
    inventory/slots.py --tf-config HOST    # that host's TF_CONFIG JSON only ('' for mirrored/tpu)
    inventory/slots.py --known-hosts       # known_hosts lines of the hosts whose keys the host file lists

    ansible-inventory -i inventory/slots.py --graph
    TFCLUSTER_SOURCE=local TFCLUSTER_WORKERS=3 ansible-playbook -i inventory/slots.py playbooks/train.yml

Environment variables:

    TFCLUSTER_SOURCE     terraform (default) | static | aws | local — where hosts come from:
                         terraform: the `hosts` output of TFCLUSTER_TF_DIR (plus cluster_name, ssh_user, tf_port,
                                    connect, bastion), read with python-terraform and the `terraform` on PATH (or
                                    next to the running Python);
                         static:    the YAML (or .json) host file TFCLUSTER_HOSTS_FILE (inventory/onprem.example.yml);
                         aws:       running EC2 instances tagged with the cluster (contract.TAG_KEYS), slot from the
                                    task_type / task_index tags (optional port, gpus, ssh_user tags);
                         local:     TFCLUSTER_WORKERS processes on 127.0.0.1, ansible_connection=local.
    TFCLUSTER_TF_DIR     Terraform root module for the terraform source (default: infra/aws of this repository;
                         a relative value is relative to the current directory).
    TFCLUSTER_HOSTS_FILE host file for the static source (required there).
    TFCLUSTER_CLUSTER    cluster name: the cluster tag value (required for aws) and the group var
                         tfcluster_cluster_name (default: Terraform's cluster_name output, the host file's
                         cluster_name, "local" for local, "onprem" for static).
    TFCLUSTER_WORKERS    local source: number of workers (default 2; parameter_server adds a chief and a ps).
    TFCLUSTER_STRATEGY   auto (default) | multi_worker_mirrored | parameter_server | mirrored | tpu. auto picks
                         parameter_server when there is a ps, else multi_worker_mirrored.
    TFCLUSTER_PORT       static/aws/terraform: the training port of a host that states none (default
                         contract.TF_PORT, the port the Terraform module opens).
    TFCLUSTER_BASE_PORT  local source only: slot i (chief, ps, then workers) listens on TFCLUSTER_BASE_PORT + i
                         (default contract.LOCAL_BASE_PORT, as infra/local's base_port).
    TFCLUSTER_CONNECT    aws (and terraform, over its `connect` output): public (default) | private | bastion —
                         whether Ansible connects to the public IP, the private IP, or the private IP through
                         TFCLUSTER_BASTION.
    TFCLUSTER_BASTION    aws (and terraform, over its `bastion` output): the jump host, [user@]host[:port].
    TFCLUSTER_KNOWN_HOSTS the cluster's own known_hosts file: every SSH host (and the jump) is checked against it.
    TFCLUSTER_HOST_KEY_CHECKING yes (default with TFCLUSTER_KNOWN_HOSTS) | accept-new.
    ANSIBLE_PRIVATE_KEY_FILE also given to the ssh that jumps through a bastion.
    AWS_REGION, AWS_DEFAULT_REGION, AWS_PROFILE, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL(_EC2)
                         the aws source's usual boto3 settings.

Output: groups tfcluster (every host) with children chief, ps, worker, evaluator (always present, maybe empty); host
vars ansible_host, ansible_connection, ansible_user (when known), ansible_port (when known), tfcluster_task_type,
tfcluster_task_index, tfcluster_port, tfcluster_address, tfcluster_gpus, tfcluster_instance_type (when known); group
vars on tfcluster: tfcluster_cluster_spec, tfcluster_strategy, tfcluster_cluster_name, tfcluster_chief,
tfcluster_all_gpus, and, when there are SSH options to give, ansible_ssh_common_args and ansible_host_key_checking.
Every string variable is marked unsafe ({"__ansible_unsafe": ...}), so Ansible never templates what a host file, a
tag or Terraform said. Keys are sorted and host lists are in slot order (chief, ps, worker, evaluator; then index).

Exit codes: 0 printed; 2 (contract.EXIT_BAD_INPUT) the inventory or the command line is invalid — every problem is
listed on stderr as "FIELD: MESSAGE. Fix: FIX" and nothing is printed on stdout; 1 the project is not installed in
the Python that runs the script.
"""

from __future__ import annotations

import sys


def main() -> int:
    try:
        from tfcluster.inventory.cli import main as cli_main
    except ModuleNotFoundError as exc:  # run by a Python that does not have the project installed
        print(f"tfcluster inventory: cannot import {exc.name!r} with {sys.executable}. Fix: `make setup` (it installs "
              "the project into .venv), then run with .venv/bin first on PATH\nNo inventory was printed.",
              file=sys.stderr)
        return 1
    return cli_main()


if __name__ == "__main__":
    sys.exit(main())
