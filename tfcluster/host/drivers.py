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
- Fabric manager only on NVSwitch systems (p4d, p4de, p5, p5e, p5en, or an NVSwitch PCI bridge), at exactly the
  installed driver's version (NVIDIA's Fabric Manager guide: the two versions must match): ``nvidia-fabricmanager-
  <major>=<version>-*``; the driver only for NVIDIA devices (PCI vendor 0x10de), never for AMD (g4ad) or others.
- The branch: NVIDIA's data center branch the distribution packages (:data:`DEFAULT_BRANCHES`; docs/playbooks.md
  has the table, its date and sources); a pin on a branch Ubuntu only ships as a transitional package is refused.
- The kernel modules: NVIDIA's open modules (``-open`` packages) when every GPU is Turing or newer (PCI device id
  >= 0x1e00; Blackwell, >= 0x2900, needs them), the proprietary ones when any GPU is older (open-gpu-kernel-modules
  README: Turing and later only; NVIDIA recommends the open modules from Turing on).
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
# The branch each supported distribution gets when nvidia_driver_branch is '' (docs/playbooks.md: NVIDIA's data center
# drivers, "Supported Drivers and CUDA Toolkit Versions": R580 is the Long Term Support Branch to June 2028 and the
# last one for Maxwell, Pascal and Volta; Canonical packages it as 580-server for 22.04 and 24.04; Debian 12 has 535).
DEFAULT_BRANCHES: dict[tuple[str, str], str] = {("Ubuntu", "22.04"): "580", ("Ubuntu", "24.04"): "580",
                                                ("Debian", "12"): "535"}
DEFAULT_BRANCH = "580"
# Ubuntu -server branches that are only transitional packages now (they install the branch on the right).
UBUNTU_TRANSITIONAL: dict[str, str] = {"550": "580", "565": "580", "570": "580"}
# PCI device ids of NVIDIA GPUs: Turing starts at 0x1e00 (TU102), Blackwell at 0x2900 (GB100); below 0x1e00 are
# Volta, Pascal and older (GV100 0x1dbx, GP108 0x1d01). docs/playbooks.md explains the rule.
TURING_FIRST_DEVICE = 0x1E00
BLACKWELL_FIRST_DEVICE = 0x2900
MODULE_CHOICES: tuple[str, ...] = ("auto", "open", "proprietary")


@dataclass(frozen=True)
class HostFacts:
    """What a host is; gathered by the driver_facts module (or written by a test)."""

    distribution: str = ""
    version: str = ""
    arch: str = "x86_64"
    kernel: str = ""
    instance_type: str = ""
    # (vendor, class, device) of every PCI device, e.g. ("0x10de", "0x030200", "0x2330"); (vendor, class) is read
    # as an unknown device id.
    pci: tuple[tuple[str, ...], ...] = ()
    smi_works: bool = False
    secure_boot: bool = False
    local: bool = False
    # Package names apt has a candidate for (the role asks only about the precompiled ones).
    available: frozenset[str] = frozenset()
    # The installed driver's version (its package, else the loaded module's /sys/module/nvidia/version), '' if none.
    driver_version: str = ""


@dataclass(frozen=True)
class Plan:
    """What to do. action: skip | verify | install | refuse."""

    action: str
    reason: str
    method: str = ""  # precompiled | dkms | debian
    modules: str = ""  # open | proprietary: the kernel modules the packages bring
    branch: str = ""
    packages: tuple[str, ...] = ()
    module_packages: tuple[str, ...] = ()  # the packages that bring the kernel module: a change means a reboot
    nonfree: bool = False
    fabric_manager: str = ""  # the package, '' when the host has no NVSwitch
    persistenced: bool = False
    notes: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, object]:
        return {"action": self.action, "reason": self.reason, "method": self.method, "modules": self.modules,
                "branch": self.branch, "packages": list(self.packages),
                "module_packages": list(self.module_packages), "nonfree": self.nonfree,
                "fabric_manager": self.fabric_manager, "persistenced": self.persistenced, "notes": list(self.notes)}


def family(instance_type: str) -> str:
    """``p4d.24xlarge`` -> ``p4d``; '' for no type."""
    return instance_type.split(".", 1)[0].lower() if instance_type else ""


def _is_gpu(device: tuple[str, ...]) -> bool:
    return device[0].lower() == NVIDIA_VENDOR and device[1].lower().startswith(DISPLAY_CLASS)


def nvidia_gpus(pci: Iterable[tuple[str, ...]]) -> int:
    return sum(1 for device in pci if _is_gpu(device))


def gpu_device_ids(pci: Iterable[tuple[str, ...]]) -> list[int | None]:
    """The PCI device id of each NVIDIA GPU (None where unknown or unreadable)."""
    ids: list[int | None] = []
    for device in pci:
        if _is_gpu(device):
            text = device[2].lower() if len(device) > 2 else ""
            ids.append(int(text, 16) if re.fullmatch(r"0x[0-9a-f]{1,4}", text) else None)
    return ids


def kernel_modules(pci: Iterable[tuple[str, ...]], choice: str = "auto") -> tuple[str, str | None]:
    """(open | proprietary, problem): the open modules when every GPU is Turing or newer, else the proprietary ones;
    a Blackwell GPU beside a pre-Turing one cannot be driven by either. ``choice`` open/proprietary overrides auto."""
    ids = gpu_device_ids(pci)
    old = [i for i in ids if i is None or i < TURING_FIRST_DEVICE]
    blackwell = [i for i in ids if i is not None and i >= BLACKWELL_FIRST_DEVICE]
    if choice == "proprietary" and blackwell:
        return "proprietary", ("nvidia_driver_kernel_modules=proprietary, but a Blackwell GPU (PCI device "
                               f"{blackwell[0]:#06x}) runs only on NVIDIA's open kernel modules. Fix: set "
                               "nvidia_driver_kernel_modules=auto (or open)")
    if choice in ("open", "proprietary"):
        return choice, None
    if old and blackwell:
        return "open", ("this host mixes a Blackwell GPU (open kernel modules only) with a GPU older than Turing "
                        "(proprietary modules only). Fix: use GPUs of one kind per host")
    return ("proprietary" if old or not ids else "open"), None


def has_nvswitch(pci: Iterable[tuple[str, ...]], instance_type: str = "") -> bool:
    found = any(d[0].lower() == NVIDIA_VENDOR and d[1].lower().startswith(BRIDGE_OTHER_CLASS) for d in pci)
    return found or family(instance_type) in NVSWITCH_FAMILIES


def default_branch(distribution: str, version: str) -> str:
    """The branch a supported distribution gets (:data:`DEFAULT_BRANCHES`), DEFAULT_BRANCH elsewhere."""
    return DEFAULT_BRANCHES.get((distribution, version), DEFAULT_BRANCH)


def upstream_version(package_version: str) -> str:
    """``580.95.05-0ubuntu0.22.04.1`` -> ``580.95.05``; a module's ``580.95.05`` stays; '' when not a driver
    version."""
    match = re.match(r"(?:\d+:)?(\d+\.\d+(?:\.\d+)?)(?:[-~+].*)?$", package_version.strip())
    return match.group(1) if match else ""


def fabric_manager_package(branch: str, driver_version: str = "") -> str:
    """The fabric manager at exactly the installed driver's version (``nvidia-fabricmanager-580=580.95.05-*``, an
    apt version pattern), or the branch's package while no driver is installed yet."""
    version = upstream_version(driver_version)
    if version:
        return f"nvidia-fabricmanager-{version.split('.')[0]}={version}-*"
    return f"nvidia-fabricmanager-{branch}"


def kernel_flavour(kernel: str) -> str:
    """Ubuntu's kernel flavour: ``5.15.0-1051-aws`` -> ``aws``, ``6.8.0-45-generic`` -> ``generic``; '' if none."""
    match = re.fullmatch(r"\d+\.\d+\.\d+-\d+-([a-z0-9][a-z0-9-]*)", kernel)
    return match.group(1) if match else ""


def _suffix(modules: str) -> str:
    return "-open" if modules == "open" else ""


def precompiled_packages(branch: str, kernel: str, modules: str = "proprietary") -> tuple[str, ...]:
    """Canonical's signed modules for the running kernel, and the flavour's meta package (future kernels)."""
    flavour = kernel_flavour(kernel)
    server = f"{branch}-server{_suffix(modules)}"
    names = [f"linux-modules-nvidia-{server}-{kernel}"]
    if flavour:
        names.append(f"linux-modules-nvidia-{server}-{flavour}")
    return tuple(names)


def _userspace(branch: str, dkms: bool, modules: str) -> tuple[str, ...]:
    server = f"{branch}-server{_suffix(modules)}"
    headless = f"nvidia-headless-{server}" if dkms else f"nvidia-headless-no-dkms-{server}"
    # nvidia-modprobe: the tfcluster.nvidia-uvm unit makes the uvm device nodes with it (docs/jobs.md).
    return (headless, f"nvidia-utils-{branch}-server", f"nvidia-compute-utils-{branch}-server", "nvidia-modprobe")


def _ubuntu(facts: HostFacts, branch: str, fabric: str, modules: str) -> Plan:
    if branch in UBUNTU_TRANSITIONAL:
        return Plan("refuse", f"nvidia_driver_branch={branch}: Ubuntu ships branch {branch} only as a transitional "
                    f"package that installs branch {UBUNTU_TRANSITIONAL[branch]}. Fix: set nvidia_driver_branch to "
                    f"{UBUNTU_TRANSITIONAL[branch]}, or leave it empty for the supported branch "
                    f"({default_branch(facts.distribution, facts.version)})")
    kind = dict(modules=modules, branch=branch, fabric_manager=fabric, persistenced=True)
    precompiled = precompiled_packages(branch, facts.kernel, modules)
    if precompiled[0] in facts.available:
        return Plan("install", f"Canonical's signed {modules} modules for kernel {facts.kernel}",
                    method="precompiled", packages=(*precompiled, *_userspace(branch, False, modules)),
                    module_packages=precompiled, **kind)  # type: ignore[arg-type]
    headers = f"linux-headers-{facts.kernel}"
    if facts.secure_boot:
        return Plan("refuse", f"no precompiled NVIDIA {branch}-server{_suffix(modules)} modules for kernel "
                    f"{facts.kernel} and Secure Boot is on, so a DKMS-built module would not load. Fix: boot a kernel "
                    "Canonical builds signed modules for (apt-cache search linux-modules-nvidia-"
                    f"{branch}-server{_suffix(modules)}), enroll a MOK key for DKMS, or turn Secure Boot off")
    dkms = (f"nvidia-headless-{branch}-server{_suffix(modules)}",)
    return Plan("install", f"no precompiled modules for kernel {facts.kernel}: DKMS build ({modules}) with its "
                "headers", method="dkms", packages=(headers, "dkms", *_userspace(branch, True, modules)),
                module_packages=(headers, *dkms), **kind)  # type: ignore[arg-type]


def _debian(facts: HostFacts, fabric: str, modules: str) -> Plan:
    if fabric:
        return Plan("refuse", "this host has NVSwitch, and Debian 12 packages no NVIDIA fabric manager. Fix: use "
                    "Ubuntu 22.04/24.04 or the AWS Deep Learning AMI for NVSwitch types")
    if any(i is not None and i >= BLACKWELL_FIRST_DEVICE for i in gpu_device_ids(facts.pci)):
        return Plan("refuse", "this host has a Blackwell GPU, and Debian 12's NVIDIA driver (branch 535) predates "
                    "Blackwell. Fix: use Ubuntu 22.04/24.04 (branch 580, open modules)")
    if facts.secure_boot:
        return Plan("refuse", "Debian 12 builds the NVIDIA module with DKMS, which does not load under Secure Boot "
                    "without an enrolled MOK key. Fix: enroll DKMS's key (mokutil --import "
                    "/var/lib/dkms/mok.pub) or turn Secure Boot off")
    headers = f"linux-headers-{facts.kernel}"
    # contrib's nvidia-open-kernel-dkms needs the GSP firmware; non-free's nvidia-kernel-dkms the misc firmware.
    dkms, firmware = (("nvidia-open-kernel-dkms", "firmware-nvidia-gsp") if modules == "open"
                      else ("nvidia-kernel-dkms", "firmware-misc-nonfree"))
    module_packages = (headers, dkms)
    return Plan("install", f"Debian 12: non-free driver, DKMS build ({modules}) with the running kernel's headers",
                method="debian", modules=modules, branch=DEFAULT_BRANCHES[("Debian", "12")], nonfree=True,
                persistenced=True, module_packages=module_packages,
                packages=(*module_packages, "nvidia-smi", "nvidia-persistenced", "nvidia-modprobe", "libcuda1",
                          firmware))


def _not_ours(facts: HostFacts, gpus: int) -> Plan | None:
    """A plan for a host whose GPUs (if any) are not NVIDIA's, or None when the host has NVIDIA GPUs."""
    if family(facts.instance_type) in NON_NVIDIA_FAMILIES:
        return Plan("skip", f"{facts.instance_type} has no NVIDIA GPU (AMD, Habana, Inferentia or Trainium): no "
                    "NVIDIA driver")
    if gpus == 0:
        others = sorted({d[0] for d in facts.pci if d[1].lower().startswith(DISPLAY_CLASS) and d[0] != NVIDIA_VENDOR})
        what = f"only GPUs of PCI vendor {', '.join(others)}" if others else "no GPU"
        return Plan("skip", f"{what} (no NVIDIA device, PCI vendor {NVIDIA_VENDOR}): no driver needed")
    return None


def plan(facts: HostFacts, branch: str = "", modules: str = "auto") -> Plan:
    """What the nvidia_driver role does on a host with ``facts`` (see the module docstring for the sources).
    ``branch`` '' is the distribution's (:func:`default_branch`); ``modules`` auto | open | proprietary."""
    gpus = nvidia_gpus(facts.pci)
    not_ours = _not_ours(facts, gpus)
    if not_ours:
        return not_ours
    branch = branch or default_branch(facts.distribution, facts.version)
    fabric = (fabric_manager_package(branch, facts.driver_version)
              if has_nvswitch(facts.pci, facts.instance_type) else "")
    if facts.smi_works:
        return Plan("verify", f"nvidia-smi works ({gpus} NVIDIA GPU(s)): the driver is in place (e.g. the Deep "
                    "Learning AMI), only verified", fabric_manager=fabric, branch=branch)
    if facts.local:
        return Plan("refuse", "an NVIDIA GPU is here but nvidia-smi fails, and the role never installs drivers on "
                    "the control machine (a local slot). Fix: install the driver yourself, or set tfcluster_gpus=0")
    if facts.version not in SUPPORTED.get(facts.distribution, ()):
        return Plan("refuse", f"the role installs NVIDIA drivers on Ubuntu 22.04/24.04 and Debian 12, not "
                    f"{facts.distribution or '?'} {facts.version or '?'}. Fix: install the driver yourself or use "
                    "the AWS Deep Learning AMI")
    if modules not in MODULE_CHOICES:
        return Plan("refuse", f"nvidia_driver_kernel_modules={modules!r} is not one of {', '.join(MODULE_CHOICES)}. "
                    "Fix: set auto (open modules on Turing and newer), open or proprietary")
    kind, problem = kernel_modules(facts.pci, modules)
    if problem:
        return Plan("refuse", problem)
    if facts.distribution == "Debian":
        return _debian(facts, fabric, kind)
    return _ubuntu(facts, branch, fabric, kind)
