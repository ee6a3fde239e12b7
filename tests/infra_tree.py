"""infra/ as committed, copied for a test: no .terraform/, state, tfvars or the AWS twin's endpoint override, so a
test never reads what a run (or a twin test in another worker) wrote into the checkout, nor writes back into it."""

from __future__ import annotations

import shutil
from pathlib import Path

from tfcluster.provision.common import TWIN_OVERRIDE

REPO = Path(__file__).resolve().parents[1]
LEFT_OUT = (".terraform", "*.tfstate*", "*.tfvars", "*.tfvars.json", TWIN_OVERRIDE)


def copy_infra(dest: Path, *also_left_out: str) -> Path:
    """Copy infra/ to ``dest`` without LEFT_OUT (and ``also_left_out``); returns ``dest``."""
    shutil.copytree(REPO / "infra", dest, ignore=shutil.ignore_patterns(*LEFT_OUT, *also_left_out))
    return dest
