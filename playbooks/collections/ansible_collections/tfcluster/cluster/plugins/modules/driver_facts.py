#!/usr/bin/python
"""tfcluster.cluster.driver_facts: a host's GPU facts and the driver plan (tfcluster/host/drivers.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: driver_facts
short_description: Gather a host's GPU facts and decide what the NVIDIA driver role does
description:
  - Reads the PCI devices (vendor and class of each), the OS release, architecture and kernel, Secure Boot, whether
    C(nvidia-smi) works and, on Ubuntu with an NVIDIA GPU, whether apt offers Canonical's precompiled modules for the
    running kernel.
  - Returns the facts and the plan of C(tfcluster.host.drivers.plan) (skip, verify, install or refuse, with the
    packages).
  - Read-only.
author: tfcluster (@tfcluster)
version_added: "1.0.0"
options:
  branch:
    description: The pinned driver branch (Ubuntu server branches, e.g. C(550)).
    type: str
    default: "550"
  instance_type:
    description: The host's EC2 instance type, when known ('' on-prem).
    type: str
    default: ""
  local:
    description: The host is the control machine (a local slot); the role never installs there.
    type: bool
    default: false
extends_documentation_fragment:
  - tfcluster.cluster.attributes
  - tfcluster.cluster.attributes.info_module
"""

EXAMPLES = r"""
- name: Decide what to do about the GPU driver
  tfcluster.cluster.driver_facts:
    branch: "550"
    instance_type: p4d.24xlarge
  register: driver
"""

RETURN = r"""
facts:
  description: The gathered facts (distribution, version, arch, kernel, pci, smi_works, secure_boot, available,
    nouveau_loaded).
  returned: always
  type: dict
plan:
  description: "C({action, reason, method, packages, module_packages, nonfree, fabric_manager, persistenced})."
  returned: always
  type: dict
smi:
  description: The lines of C(nvidia-smi --query-gpu=name,driver_version) when it works.
  returned: always
  type: list
"""

import glob
import os
import platform
import shutil
import subprocess

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.tfcluster.cluster.plugins.module_utils.host.drivers import (
    NVIDIA_VENDOR,
    HostFacts,
    nvidia_gpus,
    plan,
    precompiled_packages,
)

SECURE_BOOT_GLOB = "/sys/firmware/efi/efivars/SecureBoot-*"


def read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def os_release(path: str = "/etc/os-release") -> tuple[str, str]:
    fields = dict(line.split("=", 1) for line in read(path).splitlines() if "=" in line)
    ident = fields.get("ID", "").strip('"')
    return {"ubuntu": "Ubuntu", "debian": "Debian"}.get(ident, ident), fields.get("VERSION_ID", "").strip('"')


def pci_devices(root: str = "/sys/bus/pci/devices") -> tuple[tuple[str, str], ...]:
    return tuple(sorted((read(os.path.join(d, "vendor")).lower(), read(os.path.join(d, "class")).lower())
                        for d in glob.glob(os.path.join(root, "*"))))


def secure_boot() -> bool:
    for path in glob.glob(SECURE_BOOT_GLOB):
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except OSError:
            continue
        return bool(data) and data[-1] == 1
    return False


def smi_lines() -> list[str] | None:
    if not shutil.which("nvidia-smi"):
        return None
    try:
        proc = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, check=False, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    return lines if proc.returncode == 0 and lines else None


def apt_candidates(names: list[str]) -> frozenset[str]:
    """The names apt has an installation candidate for."""
    if not names or not shutil.which("apt-cache"):
        return frozenset()
    proc = subprocess.run(["apt-cache", "policy", *names], capture_output=True, text=True, check=False,
                          env={**os.environ, "LC_ALL": "C"})
    found, current = set(), ""
    for line in proc.stdout.splitlines():
        if line and not line[0].isspace() and line.endswith(":"):
            current = line[:-1]
        elif line.strip().startswith("Candidate:") and "(none)" not in line and current:
            found.add(current)
    return frozenset(found)


def main() -> None:
    module = AnsibleModule(argument_spec={"branch": {"type": "str", "default": "550"},
                                          "instance_type": {"type": "str", "default": ""},
                                          "local": {"type": "bool", "default": False}},
                           supports_check_mode=True)
    distribution, version = os_release()
    kernel = platform.release()
    pci = pci_devices()
    smi = smi_lines()
    available: frozenset[str] = frozenset()
    if nvidia_gpus(pci) and smi is None and distribution == "Ubuntu":
        available = apt_candidates(list(precompiled_packages(module.params["branch"], kernel)))
    facts = HostFacts(distribution=distribution, version=version, arch=platform.machine(), kernel=kernel,
                      instance_type=module.params["instance_type"], pci=pci, smi_works=smi is not None,
                      secure_boot=secure_boot(), local=module.params["local"], available=available)
    result = plan(facts, module.params["branch"])
    module.exit_json(changed=False, plan=result.to_dict(), smi=smi or [],
                     facts={"distribution": distribution, "version": version, "arch": facts.arch, "kernel": kernel,
                            "nvidia_gpus": nvidia_gpus(pci), "nvidia_vendor": NVIDIA_VENDOR,
                            "pci": [list(p) for p in pci], "smi_works": facts.smi_works,
                            "secure_boot": facts.secure_boot, "available": sorted(available),
                            "nouveau_loaded": os.path.isdir("/sys/module/nouveau")})


if __name__ == "__main__":
    main()
