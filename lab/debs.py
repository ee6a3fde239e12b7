"""The lab's package source: Debian's .deb files that the lab hosts lack, fetched on the outer machine (the hosts have
no route out) into ``.cache/lab/debs/<set>/`` with a Packages index, the way the wheelhouse serves Python packages.

    ensure_debs(rootfs, root)      -> the directory (fetched once per package set and rootfs; reused after)

What is fetched is what ``apt-get install --no-install-recommends PACKAGES`` would install on the rootfs (apt's own
resolution, against the rootfs's dpkg status), downloaded with ``apt-get download`` from the outer machine's apt
sources (Debian bookworm, like the rootfs). The slurm role copies the directory to each host and installs from it as
a local apt source (``deb [trusted=yes] file:DIR ./``); the Packages index is written here (the fields of each
package's control file, plus Filename, Size and SHA256: what dpkg-scanpackages writes), so no dpkg-dev is needed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from lab.config import LabError
from lab.system import remove_tree, run

log = logging.getLogger(__name__)

# Slurm from Debian (bookworm: 22.05) and munge: what the slurm role installs on a lab host.
SLURM_PACKAGES: tuple[str, ...] = ("slurmd", "slurmctld", "slurm-client", "munge")
STAMP = "debs.json"
_INST = re.compile(r"^Inst (?P<name>[a-z0-9][a-z0-9+.-]*) ", re.M)


def missing_packages(simulation: str) -> list[str]:
    """The packages ``apt-get -s install`` would install (its ``Inst NAME ...`` lines), in its order."""
    return list(dict.fromkeys(match.group("name") for match in _INST.finditer(simulation)))


def set_name(packages: Iterable[str], rootfs_stamp: str) -> str:
    """A directory name for one package set on one rootfs (a rebuilt rootfs may lack other packages)."""
    digest = hashlib.sha256(json.dumps([sorted(packages), rootfs_stamp]).encode()).hexdigest()
    return digest[:16]


def packages_index(paragraphs: Sequence[tuple[str, str, bytes]]) -> str:
    """A Packages index of (control paragraph, file name, file content) triples."""
    entries = []
    for control, name, data in paragraphs:
        entries.append(f"{control.rstrip()}\nFilename: ./{name}\nSize: {len(data)}\n"
                       f"SHA256: {hashlib.sha256(data).hexdigest()}\n")
    return "\n".join(entries)


def write_index(directory: Path) -> int:
    """Write ``directory/Packages`` for every .deb in it; the number of packages."""
    paragraphs = []
    for deb in sorted(directory.glob("*.deb")):
        control = run(["dpkg-deb", "-f", str(deb)]).stdout
        paragraphs.append((control, deb.name, deb.read_bytes()))
    (directory / "Packages").write_text(packages_index(paragraphs))
    return len(paragraphs)


def ensure_debs(rootfs: Path, root: Path, packages: Sequence[str] = SLURM_PACKAGES) -> Path:
    """The directory of .debs (with Packages) that installs ``packages`` on hosts of ``rootfs``; fetched once."""
    stamp_file = rootfs / ".tfcluster-lab-rootfs.json"
    rootfs_stamp = stamp_file.read_text() if stamp_file.is_file() else ""
    final = root / set_name(packages, rootfs_stamp)
    if (final / STAMP).is_file():
        return final
    status = (rootfs / "var/lib/dpkg/status").resolve()
    if not status.is_file():
        raise LabError(f"{status} is missing: build the lab rootfs first (`python -m lab setup`)")
    simulation = run(["apt-get", "-s", "-o", f"Dir::State::Status={status}", "install", "--no-install-recommends",
                      *packages], timeout=300).stdout
    names = missing_packages(simulation)
    if not names:
        raise LabError(f"apt-get found nothing to install for {', '.join(packages)} on the rootfs (are they "
                       "installed in it already, or unknown to the outer machine's apt sources?)")
    tmp = final.with_name(final.name + ".tmp")
    remove_tree(tmp)
    tmp.mkdir(parents=True)
    log.info("fetching %d .deb files for the lab hosts (%s) into %s", len(names), ", ".join(packages), final)
    proc = run(["apt-get", "download", *names], check=False, timeout=900, cwd=tmp)
    if proc.returncode != 0:
        raise LabError(f"apt-get download failed (exit {proc.returncode}): {(proc.stderr or proc.stdout)[-2000:]}. "
                       "Fix: `apt-get update` on the outer machine, or check its apt sources (Debian bookworm)")
    count = write_index(tmp)
    (tmp / STAMP).write_text(json.dumps({"packages": list(packages), "files": count}, sort_keys=True) + "\n")
    remove_tree(final)
    tmp.rename(final)
    return final
