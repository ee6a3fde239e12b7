"""The committed dependency lock files (issue 14): infra/local pins the offline mirror's provider, infra/aws a current
release, each with the hashes of the platforms docs/infra.md lists; every other .terraform.lock.hcl stays ignored."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

INFRA = Path(__file__).resolve().parents[3] / "infra"
PROVIDER = "registry.terraform.io/hashicorp/aws"


def lock_entry(root: str) -> tuple[str, list[str], list[str]]:
    """(version, h1 hashes, zh hashes) of hashicorp/aws in infra/<root>/.terraform.lock.hcl."""
    text = (INFRA / root / ".terraform.lock.hcl").read_text()
    block = re.search(rf'provider "{re.escape(PROVIDER)}" \{{(.*?)\n\}}', text, re.S)
    assert block, f"infra/{root}: no {PROVIDER} entry"
    version = re.search(r'version\s+=\s+"([^"]+)"', block.group(1))
    assert version
    return (version.group(1), re.findall(r'"h1:([A-Za-z0-9+/=]{44})"', block.group(1)),
            re.findall(r'"zh:([0-9a-f]{64})"', block.group(1)))


def test_local_lock_pins_the_mirror_provider_for_every_platform() -> None:
    version, h1, zh = lock_entry("local")
    assert version == "3.39.0"
    assert len(h1) == 1  # linux_amd64, computed from the mirror's zip
    assert len(zh) == 11 and len(set(zh)) == 11  # every package of the 3.39.0 release


def test_aws_lock_pins_a_current_release_for_every_platform() -> None:
    version, h1, zh = lock_entry("aws")
    major = int(version.split(".")[0])
    constraint = re.search(r'version = ">= 3\.39\.0, < (\d+)\.0\.0"', (INFRA / "aws" / "versions.tf").read_text())
    assert constraint and 6 <= major < int(constraint.group(1))
    assert len(set(h1)) == 14 and len(set(zh)) == 15  # terraform providers lock for all 14 platforms


@pytest.mark.parametrize("root", ["aws", "local"])
def test_lock_files_are_committed_only_for_the_roots(repo: Path, root: str) -> None:
    lock = f"infra/{root}/.terraform.lock.hcl"
    ignored = subprocess.run(["git", "check-ignore", "-q", lock], cwd=repo, check=False)
    other = subprocess.run(["git", "check-ignore", "-q", "infra/modules/gpu_cluster/.terraform.lock.hcl"], cwd=repo,
                           check=False)
    assert (ignored.returncode, other.returncode) == (1, 0), "change .gitignore: see docs/infra.md (lock files)"
