#!/usr/bin/python
"""tfcluster.cluster.driver_facts: a host's GPU facts and the driver plan (tfcluster/host/drivers.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: driver_facts
short_description: Gather a host's GPU facts and decide what the NVIDIA driver role does
description:
  - Reads the PCI devices (vendor, class and device id of each), the OS release, architecture and kernel, Secure
    Boot, whether C(nvidia-smi) works, the installed driver's version (its package, else the loaded module) and, on
    Ubuntu with an NVIDIA GPU, whether apt offers Canonical's precompiled modules for the running kernel.
  - Returns the facts and the plan of C(tfcluster.host.drivers.plan) (skip, verify, install or refuse, with the
    packages).
  - Read-only.
author: tfcluster (@tfcluster)
version_added: "1.0.0"
options:
  branch:
    description: The driver branch (Ubuntu server branches, e.g. C(580)); '' - the distribution's (docs/playbooks.md).
    type: str
    default: ""
  modules:
    description: The kernel modules - C(auto) (open on Turing and newer), C(open) or C(proprietary).
    type: str
    choices: [auto, open, proprietary]
    default: auto
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
    instance_type: p4d.24xlarge
  register: driver
"""

RETURN = r"""
facts:
  description: The gathered facts (distribution, version, arch, kernel, pci, smi_works, secure_boot, available,
    driver_version, nouveau_loaded).
  returned: always
  type: dict
plan:
  description: "C({action, reason, method, modules, branch, packages, module_packages, nonfree, fabric_manager,
    persistenced})."
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
    default_branch,
    kernel_modules,
    nvidia_gpus,
    plan,
    precompiled_packages,
    upstream_version,
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


def pci_devices(root: str = "/sys/bus/pci/devices") -> tuple[tuple[str, str, str], ...]:
    """(vendor, class, device id) of every PCI device."""
    return tuple(sorted(tuple(read(os.path.join(d, name)).lower() for name in ("vendor", "class", "device"))
                        for d in glob.glob(os.path.join(root, "*"))))


def installed_driver_version(branch: str) -> str:
    """The installed driver's version: its user-space package (what runs after a reboot), else the loaded module's."""
    if shutil.which("dpkg-query"):
        for package in (f"nvidia-utils-{branch}-server", "nvidia-smi"):
            proc = subprocess.run(["dpkg-query", "-W", "-f=${db:Status-Abbrev} ${Version}", package],
                                  capture_output=True, text=True, check=False)
            status, _, version = proc.stdout.partition(" ")
            if proc.returncode == 0 and status.startswith("ii") and upstream_version(version):
                return upstream_version(version)
    return upstream_version(read("/sys/module/nvidia/version"))


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
    module = AnsibleModule(argument_spec={"branch": {"type": "str", "default": ""},
                                          "modules": {"type": "str", "default": "auto",
                                                      "choices": ["auto", "open", "proprietary"]},
                                          "instance_type": {"type": "str", "default": ""},
                                          "local": {"type": "bool", "default": False}},
                           supports_check_mode=True)
    distribution, version = os_release()
    kernel = platform.release()
    pci = pci_devices()
    smi = smi_lines()
    branch = module.params["branch"] or default_branch(distribution, version)
    available: frozenset[str] = frozenset()
    if nvidia_gpus(pci) and smi is None and distribution == "Ubuntu":
        kind = kernel_modules(pci, module.params["modules"])[0]
        available = apt_candidates(list(precompiled_packages(branch, kernel, kind)))
    driver_version = installed_driver_version(branch) if nvidia_gpus(pci) else ""
    facts = HostFacts(distribution=distribution, version=version, arch=platform.machine(), kernel=kernel,
                      instance_type=module.params["instance_type"], pci=pci, smi_works=smi is not None,
                      secure_boot=secure_boot(), local=module.params["local"], available=available,
                      driver_version=driver_version)
    result = plan(facts, branch, module.params["modules"])
    module.exit_json(changed=False, plan=result.to_dict(), smi=smi or [],
                     facts={"distribution": distribution, "version": version, "arch": facts.arch, "kernel": kernel,
                            "nvidia_gpus": nvidia_gpus(pci), "nvidia_vendor": NVIDIA_VENDOR,
                            "pci": [list(p) for p in pci], "smi_works": facts.smi_works,
                            "secure_boot": facts.secure_boot, "available": sorted(available),
                            "driver_version": driver_version,
                            "nouveau_loaded": os.path.isdir("/sys/module/nouveau")})


if __name__ == "__main__":
    main()
