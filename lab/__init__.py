"""The lab: real hosts (systemd-nspawn containers on a private bridge) for the multi-host tests.

`python -m lab --help` for the CLI; `Lab` for tests (see lab/lab.py and docs/lab.md).
"""

from lab.admin import leftovers, setup
from lab.config import DEFAULT_LAB, LabError, LabHost, LabSpec
from lab.lab import Lab

__all__ = ["DEFAULT_LAB", "Lab", "LabError", "LabHost", "LabSpec", "leftovers", "setup"]
