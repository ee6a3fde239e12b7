"""GPU driver decisions: what the nvidia_driver role does on a host, as pure functions. Standard library only.

The ``tfcluster.cluster.driver_facts`` module gathers a host's facts (PCI devices, OS, kernel, Secure Boot, whether
``nvidia-smi`` works, which precompiled module packages apt offers) and returns :func:`plan` of them; the role then
only carries the plan out. Sources followed (docs/playbooks.md cites them):

- NVIDIA's ansible-role-nvidia-driver: Ubuntu from Canonical's archive (``nvidia-headless-<branch>-server``,
  ``nvidia-utils-<branch>-server``, or the no-DKMS set with the kernel objects), Debian with the ``contrib``/
  ``non-free`` components, ``linux-headers-<kernel>`` and ``firmware-misc-nonfree``; ``nvidia-persistenced``
  enabled; a reboot only when the driver install changed.
- Canonical / NVIDIA's "precompiled and Canonical signed drivers": ``linux-modules-nvidia-<branch>-server-<kernel>``
  (signed modules for the running kernel) plus the ``-<flavour>`` meta package that follows kernel updates, with
  ``nvidia-headless-no-dkms-<branch>-server``, ``nvidia-utils-<branch>-server`` and ``nvidia-compute-utils-<branch>-
  server`` (nvidia-persistenced). They load under Secure Boot; a DKMS build does not without an enrolled key.
- Fabric manager (``nvidia-fabricmanager-<branch>``) only on NVSwitch systems (p4d, p4de, p5, p5e, p5en, or an
  NVSwitch PCI bridge); the driver only for NVIDIA devices (PCI vendor 0x10de), never for AMD (g4ad) or others.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

NVIDIA_VENDOR = "0x10de"
DISPLAY_CLASS = "0x03"  # PCI class 03xxxx: VGA / 3D controllers (the GPUs)
BRIDGE_OTHER_CLASS = "0x0680"  # an NVIDIA device of class 0680xx is an NVSwitch
NVSWITCH_FAMILIES: frozenset[str] = frozenset({"p4d", "p4de", "p5", "p5e", "p5en"})
# Instance families whose accelerators are not NVIDIA GPUs: the role never installs an NVIDIA driver there.
NON_NVIDIA_FAMILIES: frozenset[str] = frozenset({"g4ad", "dl1", "dl2q", "inf1", "inf2", "trn1", "trn1n", "trn2"})
SUPPORTED: dict[str, tuple[str, ...]] = {"Ubuntu": ("22.04", "24.04"), "Debian": ("12",)}
DEFAULT_BRANCH = "550"


@dataclass(frozen=True)
class HostFacts:
    """What a host is; gathered by the driver_facts module (or written by a test)."""

    distribution: str = ""
    version: str = ""
    arch: str = "x86_64"
    kernel: str = ""
    instance_type: str = ""
    # (vendor, class) of every PCI device, e.g. ("0x10de", "0x030200")
    pci: tuple[tuple[str, str], ...] = ()
    smi_works: bool = False
    secure_boot: bool = False
    local: bool = False
    # Package names apt has a candidate for (the role asks only about the precompiled ones).
    available: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Plan:
    """What to do. action: skip | verify | install | refuse."""

    action: str
    reason: str
    method: str = ""  # precompiled | dkms | debian
    packages: tuple[str, ...] = ()
    module_packages: tuple[str, ...] = ()  # the packages that bring the kernel module: a change means a reboot
    nonfree: bool = False
    fabric_manager: str = ""  # the package, '' when the host has no NVSwitch
    persistenced: bool = False
    notes: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, object]:
        return {"action": self.action, "reason": self.reason, "method": self.method, "packages": list(self.packages),
                "module_packages": list(self.module_packages), "nonfree": self.nonfree,
                "fabric_manager": self.fabric_manager, "persistenced": self.persistenced, "notes": list(self.notes)}


def family(instance_type: str) -> str:
    """``p4d.24xlarge`` -> ``p4d``; '' for no type."""
    return instance_type.split(".", 1)[0].lower() if instance_type else ""


def nvidia_gpus(pci: Iterable[tuple[str, str]]) -> int:
    return sum(1 for vendor, cls in pci if vendor.lower() == NVIDIA_VENDOR and cls.lower().startswith(DISPLAY_CLASS))


def has_nvswitch(pci: Iterable[tuple[str, str]], instance_type: str = "") -> bool:
    found = any(vendor.lower() == NVIDIA_VENDOR and cls.lower().startswith(BRIDGE_OTHER_CLASS) for vendor, cls in pci)
    return found or family(instance_type) in NVSWITCH_FAMILIES


def kernel_flavour(kernel: str) -> str:
    """Ubuntu's kernel flavour: ``5.15.0-1051-aws`` -> ``aws``, ``6.8.0-45-generic`` -> ``generic``; '' if none."""
    match = re.fullmatch(r"\d+\.\d+\.\d+-\d+-([a-z0-9][a-z0-9-]*)", kernel)
    return match.group(1) if match else ""


def precompiled_packages(branch: str, kernel: str) -> tuple[str, ...]:
    """Canonical's signed modules for the running kernel, and the flavour's meta package (future kernels)."""
    flavour = kernel_flavour(kernel)
    names = [f"linux-modules-nvidia-{branch}-server-{kernel}"]
    if flavour:
        names.append(f"linux-modules-nvidia-{branch}-server-{flavour}")
    return tuple(names)


def _userspace(branch: str, dkms: bool) -> tuple[str, ...]:
    headless = f"nvidia-headless-{branch}-server" if dkms else f"nvidia-headless-no-dkms-{branch}-server"
    return (headless, f"nvidia-utils-{branch}-server", f"nvidia-compute-utils-{branch}-server")


def _ubuntu(facts: HostFacts, branch: str, fabric: str) -> Plan:
    modules = precompiled_packages(branch, facts.kernel)
    if modules[0] in facts.available:
        return Plan("install", f"Canonical's signed modules for kernel {facts.kernel}", method="precompiled",
                    packages=(*modules, *_userspace(branch, dkms=False)), module_packages=modules,
                    fabric_manager=fabric, persistenced=True)
    headers = f"linux-headers-{facts.kernel}"
    if facts.secure_boot:
        return Plan("refuse", f"no precompiled NVIDIA {branch}-server modules for kernel {facts.kernel} and Secure "
                    "Boot is on, so a DKMS-built module would not load. Fix: boot a kernel Canonical builds signed "
                    f"modules for (apt-cache search linux-modules-nvidia-{branch}-server), enroll a MOK key for "
                    "DKMS, or turn Secure Boot off")
    dkms = (f"nvidia-headless-{branch}-server",)
    return Plan("install", f"no precompiled modules for kernel {facts.kernel}: DKMS build with its headers",
                method="dkms", packages=(headers, "dkms", *_userspace(branch, dkms=True)),
                module_packages=(headers, *dkms), fabric_manager=fabric, persistenced=True)


def _debian(facts: HostFacts, fabric: str) -> Plan:
    if fabric:
        return Plan("refuse", "this host has NVSwitch, and Debian 12 packages no NVIDIA fabric manager. Fix: use "
                    "Ubuntu 22.04/24.04 or the AWS Deep Learning AMI for NVSwitch types")
    if facts.secure_boot:
        return Plan("refuse", "Debian 12 builds the NVIDIA module with DKMS, which does not load under Secure Boot "
                    "without an enrolled MOK key. Fix: enroll DKMS's key (mokutil --import "
                    "/var/lib/dkms/mok.pub) or turn Secure Boot off")
    headers = f"linux-headers-{facts.kernel}"
    modules = (headers, "nvidia-kernel-dkms")
    return Plan("install", "Debian 12: non-free driver, DKMS build with the running kernel's headers",
                method="debian", nonfree=True, persistenced=True, module_packages=modules,
                packages=(*modules, "nvidia-smi", "nvidia-persistenced", "libcuda1", "firmware-misc-nonfree"))


def _not_ours(facts: HostFacts, gpus: int) -> Plan | None:
    """A plan for a host whose GPUs (if any) are not NVIDIA's, or None when the host has NVIDIA GPUs."""
    if family(facts.instance_type) in NON_NVIDIA_FAMILIES:
        return Plan("skip", f"{facts.instance_type} has no NVIDIA GPU (AMD, Habana, Inferentia or Trainium): no "
                    "NVIDIA driver")
    if gpus == 0:
        others = sorted({v for v, c in facts.pci if c.lower().startswith(DISPLAY_CLASS) and v != NVIDIA_VENDOR})
        what = f"only GPUs of PCI vendor {', '.join(others)}" if others else "no GPU"
        return Plan("skip", f"{what} (no NVIDIA device, PCI vendor {NVIDIA_VENDOR}): no driver needed")
    return None


def plan(facts: HostFacts, branch: str = DEFAULT_BRANCH) -> Plan:
    """What the nvidia_driver role does on a host with ``facts`` (see the module docstring for the sources)."""
    gpus = nvidia_gpus(facts.pci)
    not_ours = _not_ours(facts, gpus)
    if not_ours:
        return not_ours
    fabric = f"nvidia-fabricmanager-{branch}" if has_nvswitch(facts.pci, facts.instance_type) else ""
    if facts.smi_works:
        return Plan("verify", f"nvidia-smi works ({gpus} NVIDIA GPU(s)): the driver is in place (e.g. the Deep "
                    "Learning AMI), only verified", fabric_manager=fabric)
    if facts.local:
        return Plan("refuse", "an NVIDIA GPU is here but nvidia-smi fails, and the role never installs drivers on "
                    "the control machine (a local slot). Fix: install the driver yourself, or set tfcluster_gpus=0")
    if facts.version not in SUPPORTED.get(facts.distribution, ()):
        return Plan("refuse", f"the role installs NVIDIA drivers on Ubuntu 22.04/24.04 and Debian 12, not "
                    f"{facts.distribution or '?'} {facts.version or '?'}. Fix: install the driver yourself or use "
                    "the AWS Deep Learning AMI")
    if facts.distribution == "Debian":
        return _debian(facts, fabric)
    return _ubuntu(facts, branch, fabric)
