"""The checkout's infra/aws root as a test reads it: a copy (tests/infra_tree.py), so the AWS twin, which writes its
endpoint override into infra/aws while a lab test runs beside the unit tests, is never seen."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.infra_tree import copy_infra


@pytest.fixture
def aws_root(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """infra/ as committed, with TFCLUSTER_TF_DIR at its aws root."""
    root = copy_infra(tmp_path_factory.mktemp("infra") / "infra") / "aws"
    monkeypatch.setenv("TFCLUSTER_TF_DIR", str(root))
    return root
