"""The checkout's infra/aws root as a test reads it: a copy, so the AWS twin (which writes its endpoint override
into infra/aws while a lab test runs beside the unit tests) is never seen, and nothing is written back."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tfcluster.provision.common import TWIN_OVERRIDE

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def aws_root(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """infra/ as committed (no .terraform/, state, tfvars or twin override), with TFCLUSTER_TF_DIR at its aws root."""
    target = tmp_path_factory.mktemp("infra") / "infra"
    shutil.copytree(REPO / "infra", target, ignore=shutil.ignore_patterns(".terraform", "*.tfstate*", "*.tfvars",
                                                                          "*.tfvars.json", TWIN_OVERRIDE))
    monkeypatch.setenv("TFCLUSTER_TF_DIR", str(target / "aws"))
    return target / "aws"
