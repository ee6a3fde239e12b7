"""tfcluster/host/drivers.py: the nvidia_driver role's decisions (OS x arch x instance type x driver present x Secure
Boot), as a table."""

from __future__ import annotations

import pytest

from tfcluster.host.drivers import (
    HostFacts,
    family,
    has_nvswitch,
    kernel_flavour,
    nvidia_gpus,
    plan,
    precompiled_packages,
)

GPU = ("0x10de", "0x030200")  # NVIDIA 3D controller
NVSWITCH = ("0x10de", "0x068000")  # NVIDIA bridge: an NVSwitch
AMD_GPU = ("0x1002", "0x038000")
NIC = ("0x1d0f", "0x020000")  # an ENA network card
KERNEL = "5.15.0-1051-aws"
SIGNED = frozenset(precompiled_packages("550", KERNEL))


def facts(**overrides: object) -> HostFacts:
    base = {"distribution": "Ubuntu", "version": "22.04", "kernel": KERNEL, "pci": (NIC, GPU)}
    return HostFacts(**{**base, **overrides})  # type: ignore[arg-type]


@pytest.mark.parametrize(("case", "host", "expected"), [
    ("no GPU at all", facts(pci=(NIC,)),
     ("skip", "", (), "no GPU")),
    ("AMD g4ad, PCI says AMD", facts(pci=(NIC, AMD_GPU), instance_type="g4ad.xlarge"),
     ("skip", "", (), "g4ad")),
    ("AMD GPU on-prem", facts(pci=(NIC, AMD_GPU)),
     ("skip", "", (), "PCI vendor 0x1002")),
    ("Deep Learning AMI: driver works", facts(smi_works=True),
     ("verify", "", (), "only verified")),
    ("Ubuntu 22.04, signed modules offered", facts(available=SIGNED),
     ("install", "precompiled", ("linux-modules-nvidia-550-server-5.15.0-1051-aws",
                                 "linux-modules-nvidia-550-server-aws", "nvidia-headless-no-dkms-550-server",
                                 "nvidia-compute-utils-550-server"), "signed")),
    ("Ubuntu 24.04 arm64 (g5g), signed modules", facts(version="24.04", arch="aarch64", available=SIGNED,
                                                      instance_type="g5g.xlarge"),
     ("install", "precompiled", ("linux-modules-nvidia-550-server-aws",), "signed")),
    ("Ubuntu, no signed modules: DKMS + headers", facts(),
     ("install", "dkms", ("linux-headers-5.15.0-1051-aws", "dkms", "nvidia-headless-550-server"), "DKMS")),
    ("Ubuntu, no signed modules, Secure Boot", facts(secure_boot=True),
     ("refuse", "", (), "Secure Boot is on")),
    ("Ubuntu, signed modules, Secure Boot", facts(secure_boot=True, available=SIGNED),
     ("install", "precompiled", (), "signed")),
    ("Debian 12: non-free + headers", facts(distribution="Debian", version="12", kernel="6.1.0-18-amd64"),
     ("install", "debian", ("linux-headers-6.1.0-18-amd64", "nvidia-kernel-dkms", "firmware-misc-nonfree"),
      "non-free")),
    ("Debian 12, Secure Boot", facts(distribution="Debian", version="12", secure_boot=True),
     ("refuse", "", (), "MOK")),
    ("Debian 12 on NVSwitch", facts(distribution="Debian", version="12", pci=(GPU, NVSWITCH)),
     ("refuse", "", (), "fabric manager")),
    ("unsupported OS", facts(distribution="Rocky", version="9"),
     ("refuse", "", (), "not Rocky 9")),
    ("Ubuntu 20.04", facts(version="20.04"),
     ("refuse", "", (), "Ubuntu 20.04")),
    ("local slot with a broken GPU", facts(local=True),
     ("refuse", "", (), "control machine")),
    ("local slot with a working GPU", facts(local=True, smi_works=True),
     ("verify", "", (), "only verified")),
])
def test_plan_table(case: str, host: HostFacts, expected: tuple) -> None:
    action, method, must_have, reason = expected
    got = plan(host, "550")
    assert (got.action, got.method) == (action, method), case
    assert set(must_have) <= set(got.packages), case
    assert reason in got.reason, (case, got.reason)
    if action == "install":
        assert got.persistenced and set(got.module_packages) <= set(got.packages) and got.module_packages


@pytest.mark.parametrize(("instance_type", "pci", "fabric"), [
    ("p4d.24xlarge", (GPU,), "nvidia-fabricmanager-550"),
    ("p4de.24xlarge", (GPU,), "nvidia-fabricmanager-550"),
    ("p5.48xlarge", (GPU,), "nvidia-fabricmanager-550"),
    ("p5e.48xlarge", (GPU,), "nvidia-fabricmanager-550"),
    ("p5en.48xlarge", (GPU,), "nvidia-fabricmanager-550"),
    ("", (GPU, NVSWITCH), "nvidia-fabricmanager-550"),  # on-prem HGX: found on the PCI bus
    ("g5.xlarge", (GPU,), ""),
    ("p3.2xlarge", (GPU,), ""),
])
def test_fabric_manager_only_on_nvswitch(instance_type: str, pci: tuple, fabric: str) -> None:
    assert plan(facts(instance_type=instance_type, pci=pci, available=SIGNED)).fabric_manager == fabric
    assert plan(facts(instance_type=instance_type, pci=pci, smi_works=True)).fabric_manager == fabric


def test_a_non_nvidia_type_never_gets_a_driver_even_with_a_stray_nvidia_vendor_id() -> None:
    assert plan(facts(instance_type="g4ad.4xlarge", pci=(GPU,))).action == "skip"


@pytest.mark.parametrize(("kernel", "flavour"), [("5.15.0-1051-aws", "aws"), ("6.8.0-45-generic", "generic"),
                                                 ("6.8.0-1015-aws-64k", "aws-64k"), ("6.1.0-18-amd64", "amd64"),
                                                 ("6.1.55", "")])
def test_kernel_flavour(kernel: str, flavour: str) -> None:
    assert kernel_flavour(kernel) == flavour


def test_helpers() -> None:
    assert family("P4D.24xlarge") == "p4d" and family("") == ""
    assert nvidia_gpus((GPU, GPU, NVSWITCH, AMD_GPU)) == 2
    assert has_nvswitch((NVSWITCH,)) and not has_nvswitch((GPU,), "g5.xlarge")
    assert precompiled_packages("535", "6.1.55") == ("linux-modules-nvidia-535-server-6.1.55",)
