"""The lab's shared directory (a read-write bind into every host: NFS's stand-in) and its package source (.deb
files fetched on the outer machine, with a Packages index), for the Slurm lab."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from lab import debs
from lab.cli import build_parser
from lab.config import LabError, LabSpec, make_spec
from lab.paths import LabPaths
from lab.process import nspawn_argv


def test_a_read_write_bind_reaches_every_host_and_the_spec_keeps_it(tmp_path: Path) -> None:
    spec = make_spec("x", ("chief", "worker"), "10.9.8.0/24", bind=["/tmp/shared:/srv/tfcluster"],
                     bind_ro=["/work/main/.venv"])
    assert spec.bind == ("/tmp/shared:/srv/tfcluster",)
    assert LabSpec.from_json(spec.to_json()) == spec
    argv = nspawn_argv(LabPaths(tmp_path, "x"), spec, spec.hosts[0])
    assert "--bind=/tmp/shared:/srv/tfcluster" in argv and "--bind-ro=/work/main/.venv" in argv
    assert LabSpec.from_json(make_spec("y", ("chief",), "10.9.8.0/24").to_json()).bind == ()


@pytest.mark.parametrize("entry", ["relative", "/a:rel", "/a:/b:rbind", ""])
def test_a_bind_must_be_absolute_without_options(entry: str) -> None:
    with pytest.raises(LabError, match="must be an absolute PATH or SOURCE:DEST"):
        make_spec("x", ("chief",), "10.9.8.0/24", bind=[entry])


def test_the_cli_takes_binds() -> None:
    args = build_parser().parse_args(["up", "--bind", "/a:/b", "--bind", "/c"])
    assert args.bind == ["/a:/b", "/c"]


SIMULATION = """NOTE: This is only a simulation!
Inst libmunge2 (0.5.15-2+deb12u1 Debian:12.15/oldstable [amd64])
Inst munge (0.5.15-2+deb12u1 Debian:12.15/oldstable [amd64])
Conf libmunge2 (0.5.15-2+deb12u1 Debian:12.15/oldstable [amd64])
Inst slurmd (22.05.8-4+deb12u3 Debian:12.15/oldstable [amd64])
Inst munge (0.5.15-2+deb12u1 Debian:12.15/oldstable [amd64])
"""


def test_what_the_rootfs_lacks_is_what_apt_would_install() -> None:
    assert debs.missing_packages(SIMULATION) == ["libmunge2", "munge", "slurmd"]
    assert debs.missing_packages("Reading package lists...\n") == []


def test_the_packages_index_names_each_file_with_its_size_and_sha256() -> None:
    text = debs.packages_index([("Package: munge\nVersion: 0.5\n", "munge_0.5_amd64.deb", b"abc"),
                                ("Package: slurmd\nVersion: 22\n\n", "slurmd_22_amd64.deb", b"")])
    paragraphs = text.split("\n\n")
    assert paragraphs[0] == ("Package: munge\nVersion: 0.5\nFilename: ./munge_0.5_amd64.deb\nSize: 3\n"
                             f"SHA256: {hashlib.sha256(b'abc').hexdigest()}")
    assert paragraphs[1].startswith("Package: slurmd\nVersion: 22\nFilename: ./slurmd_22_amd64.deb\nSize: 0\n")


def test_a_set_is_named_by_its_packages_and_the_rootfs() -> None:
    one = debs.set_name(["slurmd", "munge"], "stamp-1")
    assert one == debs.set_name(["munge", "slurmd"], "stamp-1") != debs.set_name(["munge", "slurmd"], "stamp-2")


def test_debs_need_a_built_rootfs(tmp_path: Path) -> None:
    with pytest.raises(LabError, match="build the lab rootfs first"):
        debs.ensure_debs(tmp_path / "rootfs", tmp_path / "debs")
