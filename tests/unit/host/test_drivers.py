"""tfcluster/host/drivers.py: the nvidia_driver role's decisions (OS x arch x instance type x driver present x Secure
Boot), as a table."""

from __future__ import annotations

import pytest

from tfcluster.host.drivers import (
    DEFAULT_BRANCHES,
    HostFacts,
    default_branch,
    fabric_manager_package,
    family,
    gpu_device_ids,
    has_nvswitch,
    kernel_flavour,
    kernel_modules,
    nvidia_gpus,
    plan,
    precompiled_packages,
    upstream_version,
)

GPU = ("0x10de", "0x030200")  # NVIDIA 3D controller
NVSWITCH = ("0x10de", "0x068000")  # NVIDIA bridge: an NVSwitch
AMD_GPU = ("0x1002", "0x038000")
NIC = ("0x1d0f", "0x020000")  # an ENA network card
KERNEL = "5.15.0-1051-aws"
SIGNED = frozenset(precompiled_packages("580", KERNEL))


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
     ("install", "precompiled", ("linux-modules-nvidia-580-server-5.15.0-1051-aws",
                                 "linux-modules-nvidia-580-server-aws", "nvidia-headless-no-dkms-580-server",
                                 "nvidia-compute-utils-580-server"), "signed")),
    ("Ubuntu 24.04 arm64 (g5g), signed modules", facts(version="24.04", arch="aarch64", available=SIGNED,
                                                      instance_type="g5g.xlarge"),
     ("install", "precompiled", ("linux-modules-nvidia-580-server-aws",), "signed")),
    ("Ubuntu, no signed modules: DKMS + headers", facts(),
     ("install", "dkms", ("linux-headers-5.15.0-1051-aws", "dkms", "nvidia-headless-580-server"), "DKMS")),
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
    got = plan(host, "580")
    assert (got.action, got.method) == (action, method), case
    assert set(must_have) <= set(got.packages), case
    assert reason in got.reason, (case, got.reason)
    if action == "install":
        assert got.persistenced and set(got.module_packages) <= set(got.packages) and got.module_packages


@pytest.mark.parametrize(("instance_type", "pci", "fabric"), [
    ("p4d.24xlarge", (GPU,), "nvidia-fabricmanager-580"),
    ("p4de.24xlarge", (GPU,), "nvidia-fabricmanager-580"),
    ("p5.48xlarge", (GPU,), "nvidia-fabricmanager-580"),
    ("p5e.48xlarge", (GPU,), "nvidia-fabricmanager-580"),
    ("p5en.48xlarge", (GPU,), "nvidia-fabricmanager-580"),
    ("", (GPU, NVSWITCH), "nvidia-fabricmanager-580"),  # on-prem HGX: found on the PCI bus
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


# --- branch, kernel modules, fabric manager version -----------------------------------------------------------------
V100 = ("0x10de", "0x030200", "0x1db1")  # Volta (p3)
T4 = ("0x10de", "0x030200", "0x1eb8")  # Turing (g4dn): the first family of the open modules
A100 = ("0x10de", "0x030200", "0x20b0")
H100 = ("0x10de", "0x030200", "0x2330")
B200 = ("0x10de", "0x030200", "0x2901")  # Blackwell: open modules only
OPEN_SIGNED = frozenset(precompiled_packages("580", KERNEL, "open"))


@pytest.mark.parametrize(("pci", "choice", "expected"), [
    ((V100,), "auto", ("proprietary", None)),
    ((T4,), "auto", ("open", None)),
    ((A100, A100), "auto", ("open", None)),
    ((H100,), "auto", ("open", None)),
    ((B200,), "auto", ("open", None)),
    ((T4, V100), "auto", ("proprietary", None)),  # one older GPU: the proprietary modules drive both
    ((B200, V100), "auto", ("open", "mixes a Blackwell GPU")),
    ((GPU,), "auto", ("proprietary", None)),  # device id unknown: the modules that drive every family but Blackwell
    ((T4,), "proprietary", ("proprietary", None)),
    ((V100,), "open", ("open", None)),
    ((B200,), "proprietary", ("proprietary", "runs only on NVIDIA's open kernel modules")),
])
def test_kernel_modules_table(pci: tuple, choice: str, expected: tuple) -> None:
    kind, problem = kernel_modules(pci, choice)
    assert kind == expected[0]
    assert (problem is None) == (expected[1] is None) and (expected[1] is None or expected[1] in str(problem))


@pytest.mark.parametrize(("case", "host", "branch", "modules", "expected"), [
    ("Ubuntu 22.04 default branch", facts(pci=(H100,), available=OPEN_SIGNED), "", "auto",
     ("install", "580", "open", ("linux-modules-nvidia-580-server-open-5.15.0-1051-aws",
                                 "linux-modules-nvidia-580-server-open-aws",
                                 "nvidia-headless-no-dkms-580-server-open", "nvidia-utils-580-server",
                                 "nvidia-compute-utils-580-server"))),
    ("Ubuntu 24.04 default branch, DKMS open", facts(version="24.04", pci=(T4,)), "", "auto",
     ("install", "580", "open", ("dkms", "nvidia-headless-580-server-open", "nvidia-utils-580-server"))),
    ("Volta keeps the proprietary modules", facts(pci=(V100,), available=SIGNED), "", "auto",
     ("install", "580", "proprietary", ("linux-modules-nvidia-580-server-aws", "nvidia-headless-no-dkms-580-server"))),
    ("transitional 550 pin refused", facts(pci=(T4,)), "550", "auto", ("refuse", "", "", ())),
    ("transitional 570 pin refused", facts(pci=(T4,)), "570", "auto", ("refuse", "", "", ())),
    ("an explicit supported pin", facts(pci=(T4,)), "535", "auto",
     ("install", "535", "open", ("nvidia-headless-535-server-open",))),
    ("a bad module choice", facts(pci=(T4,)), "", "closed", ("refuse", "", "", ())),
    ("Debian 12 open on Turing+", facts(distribution="Debian", version="12", kernel="6.1.0-18-amd64", pci=(A100,)),
     "", "auto", ("install", "535", "open", ("nvidia-open-kernel-dkms", "firmware-nvidia-gsp"))),
    ("Debian 12 proprietary on Volta", facts(distribution="Debian", version="12", kernel="6.1.0-18-amd64",
                                             pci=(V100,)),
     "", "auto", ("install", "535", "proprietary", ("nvidia-kernel-dkms", "firmware-misc-nonfree"))),
    ("Debian 12 cannot drive Blackwell", facts(distribution="Debian", version="12", pci=(B200,)), "", "auto",
     ("refuse", "", "", ())),
])
def test_branch_and_modules_table(case: str, host: HostFacts, branch: str, modules: str, expected: tuple) -> None:
    action, want_branch, kind, must_have = expected
    got = plan(host, branch, modules)
    assert got.action == action, (case, got.reason)
    if action == "install":
        assert (got.branch, got.modules) == (want_branch, kind), case
        assert set(must_have) <= set(got.packages), (case, got.packages)
        assert not any("-open" in p for p in got.packages) or kind == "open", case
    else:
        assert "Fix:" in got.reason, got.reason


def test_the_default_branch_is_the_distributions() -> None:
    assert default_branch("Ubuntu", "22.04") == default_branch("Ubuntu", "24.04") == "580"
    assert default_branch("Debian", "12") == "535"
    assert set(DEFAULT_BRANCHES) == {("Ubuntu", "22.04"), ("Ubuntu", "24.04"), ("Debian", "12")}


@pytest.mark.parametrize(("installed", "expected"), [
    ("580.95.05-0ubuntu0.22.04.1", "nvidia-fabricmanager-580=580.95.05-*"),
    ("580.95.05", "nvidia-fabricmanager-580=580.95.05-*"),  # /sys/module/nvidia/version
    ("575.57.08-0ubuntu1", "nvidia-fabricmanager-575=575.57.08-*"),  # a pin follows the installed major
    ("", "nvidia-fabricmanager-580"),  # nothing installed yet: the branch's package
])
def test_the_fabric_manager_matches_the_installed_driver_exactly(installed: str, expected: str) -> None:
    assert fabric_manager_package("580", installed) == expected
    host = facts(pci=(H100,), instance_type="p5.48xlarge", driver_version=installed, available=OPEN_SIGNED)
    assert plan(host).fabric_manager == expected


@pytest.mark.parametrize(("text", "version"), [("580.95.05-0ubuntu0.22.04.1", "580.95.05"),
                                               ("1:535.247.01-1~deb12u1", "535.247.01"), ("580.95.05\n", "580.95.05"),
                                               ("", ""), ("(none)", "")])
def test_upstream_version(text: str, version: str) -> None:
    assert upstream_version(text) == version


def test_device_ids_are_read_from_the_third_field() -> None:
    assert gpu_device_ids((NIC, T4, GPU, ("0x10de", "0x030200", "junk"))) == [0x1EB8, None, None]
