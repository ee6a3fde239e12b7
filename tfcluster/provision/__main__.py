"""Provision, plan, destroy or show a cluster's machines with Terraform (`make provision|plan|destroy`).

Usage (the cluster kind passes its backend; see tfcluster/kinds/):
    python -m tfcluster.provision apply   --backend local [--workers 2] [--var KEY=VALUE ...]
    python -m tfcluster.provision plan    --backend aws [--plan-hosts FILE]   # FILE: the planned hosts (JSON)
    python -m tfcluster.provision destroy --backend local [--keep-endpoint]
    python -m tfcluster.provision output  --backend local                     # `terraform output -json`
    python -m tfcluster.provision upgrade --backend aws                       # `terraform init -upgrade`
    python -m tfcluster.provision known-hosts --backend aws                   # fetch the hosts' keys again

A backend is a module of this package (local: the emulated endpoint, tfcluster/provision/local.py; aws: AWS,
tfcluster/provision/aws.py) with ROOT (infra/<ROOT>), PROVIDER (where its aws provider comes from), ACTIONS,
environment(base) and run(action, tf_dir, env, options).

Environment: TFCLUSTER_TF_DIR (root module; default infra/<ROOT>), TFCLUSTER_CLUSTER (cluster name), and each
backend's own (its docstring). Every Terraform call gets TF_CLI_CONFIG_FILE = the project's CLI config
(tfcluster/provision/terraform.py). Exit codes: 0 done, 1 a step failed (its error and fix printed), 2 bad usage.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from types import ModuleType

from tfcluster.provision import aws, awscheck, local, localaws
from tfcluster.provision import known_hosts as hostkeys
from tfcluster.provision import terraform as terraform_toolchain
from tfcluster.provision.common import ACTIONS, LOG, Options, ProvisionError, tf_dir_for

BACKENDS: dict[str, ModuleType] = {module.ROOT: module for module in (local, aws)}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tfcluster.provision", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=ACTIONS)
    parser.add_argument("--backend", required=True, choices=sorted(BACKENDS), help="the kind's provision backend")
    parser.add_argument("--tf-dir", default=None, help="root module (default: $TFCLUSTER_TF_DIR or infra/<backend>)")
    parser.add_argument("--workers", type=int, default=None, help="number of workers (local: $TFCLUSTER_WORKERS)")
    parser.add_argument("--var", action="append", default=[], metavar="KEY=VALUE", help="extra terraform -var")
    parser.add_argument("--auto-approve", action="store_true", help="do not ask before apply/destroy")
    parser.add_argument("--keep-endpoint", action="store_true", help="local destroy: leave the endpoint running")
    parser.add_argument("--plan-hosts", type=Path, default=None, help="plan: write the planned hosts here (JSON)")
    parser.add_argument("-v", "--verbose", action="store_true")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="[provision] %(message)s")
    backend = BACKENDS[args.backend]
    options = Options(workers=args.workers, extra=tuple(args.var), auto_approve=args.auto_approve,
                      keep_endpoint=args.keep_endpoint, plan_hosts=args.plan_hosts)
    try:
        if args.action not in backend.ACTIONS:
            raise ProvisionError(f"`{args.action}` is not an action of the {args.backend} backend. Fix: use one of "
                                 f"{', '.join(backend.ACTIONS)}")
        env = backend.environment()
        return int(backend.run(args.action, tf_dir_for(backend.ROOT, env, args.tf_dir), env, options))
    except (ProvisionError, localaws.LocalAwsError, terraform_toolchain.ToolchainError, awscheck.AwsCheckError,
            hostkeys.KnownHostsError) as exc:
        LOG.error("%s", exc)
        return 1


if __name__ == "__main__":
    sys.exit(main())
