"""Fixtures for the infra integration tests: the project's Terraform environment and a scratch copy of infra/."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from tests.infra_tree import copy_infra
from tfcluster.provision import terraform as terraform_toolchain


@pytest.fixture(scope="session")
def tf_env(repo: Path) -> dict[str, str]:
    """Terraform environment of the project; fails (not skips) when `make setup` has not laid out the toolchain."""
    paths = terraform_toolchain.Paths(repo)
    if not paths.provider_zip.is_file() or not paths.cli_config.is_file():
        pytest.fail("the offline Terraform toolchain is missing: run `make setup` "
                    "(python -m tfcluster.provision.toolchain install)")
    try:
        terraform_toolchain.terraform_command(paths)
    except terraform_toolchain.ToolchainError as exc:
        pytest.fail(str(exc))
    return terraform_toolchain.terraform_env(paths=paths)


@pytest.fixture(scope="session")
def infra_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """infra/ copied to a scratch dir, so init/apply never write state or .terraform/ into the checkout."""
    return copy_infra(tmp_path_factory.mktemp("infra") / "infra", ".terraform.lock.hcl")  # init writes its own


def run_tf(args: Sequence[str], cwd: Path, env: dict[str, str],
           timeout: float = 300) -> subprocess.CompletedProcess[str]:
    command = [*terraform_toolchain.terraform_command(), *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="session")
def terraform(tf_env: dict[str, str]) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run the project's terraform with the project environment: terraform(args, cwd, timeout=300)."""

    def _run(args: Sequence[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return run_tf(args, cwd, tf_env, timeout)
    return _run
