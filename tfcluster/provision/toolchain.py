"""Set up Terraform on this machine, offline (tfcluster/provision/terraform.py says what goes where):

    python -m tfcluster.provision.toolchain install [--no-mirror] [--no-checkov]   # idempotent; `make setup` runs it
    python -m tfcluster.provision.toolchain status                                 # what is in place, as JSON
    python -m tfcluster.provision.toolchain env [--provider registry]              # `export TF_CLI_CONFIG_FILE=...`
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from tfcluster.provision import mirror as tfmirror
from tfcluster.provision.terraform import (
    LOG,
    MIRROR,
    PROVIDER_SOURCES,
    Paths,
    ToolchainError,
    ensure_shim,
    render_cli_config,
    render_override_cli_config,
    render_registry_cli_config,
    repo_root,
    terraform_command,
    terraform_env,
    write_if_changed,
)


def install(paths: Paths, path_env: str, with_mirror: bool = True, with_checkov: bool = True) -> dict[str, str | None]:
    """Every step, idempotent. Returns what is in place. Without the mirror: what a control machine for CLUSTER=aws
    or onprem needs (terraform and the registry config)."""
    shim = ensure_shim(paths, path_env)
    paths.plugin_cache.mkdir(parents=True, exist_ok=True)
    write_if_changed(paths.registry_cli_config, render_registry_cli_config(paths.plugin_cache))
    if with_mirror:
        wheel = tfmirror.fetch_plugins_wheel(paths, sys.executable)
        tfmirror.extract_provider(wheel, paths.provider_zip)
        tfmirror.unpack_provider(paths.provider_zip, paths.provider_dir)
        write_if_changed(paths.cli_config, render_cli_config(paths.mirror, paths.plugin_cache))
        write_if_changed(paths.override_cli_config, render_override_cli_config(paths.provider_dir))
    checkov = None
    if with_checkov:
        checkov = tfmirror.ensure_checkov(paths, tfmirror.base_python())
    return status(paths, path_env) | {"shim": str(shim) if shim else None, "checkov": str(checkov) if checkov else None}

def status(paths: Paths, path_env: str) -> dict[str, str | None]:
    try:
        command = terraform_command(paths, path_env)[0]
    except ToolchainError:
        command = None

    def present(path: Path) -> str | None:
        return str(path) if path.exists() else None

    return {"terraform": command, "provider_zip": present(paths.provider_zip), "cli_config": present(paths.cli_config),
            "registry_cli_config": present(paths.registry_cli_config),
            "override_cli_config": present(paths.override_cli_config), "checkov": present(paths.checkov)}

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    inst = sub.add_parser("install", help="set up everything (idempotent)")
    inst.add_argument("--no-mirror", action="store_true", help="skip the offline provider mirror (aws/onprem only)")
    inst.add_argument("--no-checkov", action="store_true", help="skip the checkov venv")
    sub.add_parser("status", help="print what is in place as JSON")
    env_p = sub.add_parser("env", help="print export lines for the project's Terraform environment")
    env_p.add_argument("--provider", default=MIRROR, choices=PROVIDER_SOURCES,
                       help="the root's provider source: mirror (infra/local) or registry (infra/aws)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[terraform-toolchain] %(message)s")
    paths = Paths(repo_root())
    path_env = os.environ.get("PATH", "")
    try:
        if args.command == "install":
            result = install(paths, path_env, with_mirror=not args.no_mirror, with_checkov=not args.no_checkov)
            LOG.info("ready: %s", json.dumps(result, sort_keys=True))
        elif args.command == "status":
            print(json.dumps(status(paths, path_env), indent=2, sort_keys=True))
        else:
            env = terraform_env(paths=paths, provider=args.provider)
            for key in ("TF_CLI_CONFIG_FILE", "TF_IN_AUTOMATION", "CHECKPOINT_DISABLE"):
                print(f"export {key}={env[key]}")
    except ToolchainError as exc:
        LOG.error("%s", exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
