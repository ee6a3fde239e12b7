"""The lab: real hosts (systemd-nspawn containers on a private bridge) for the multi-host tests.

`python -m tools.lab --help` for the CLI; `Lab` for tests (see tools/lab/lab.py and docs/lab.md).
"""

from tools.lab.config import DEFAULT_LAB, LabError, LabHost, LabSpec
from tools.lab.lab import Lab, leftovers, setup

__all__ = ["DEFAULT_LAB", "Lab", "LabError", "LabHost", "LabSpec", "leftovers", "setup"]
