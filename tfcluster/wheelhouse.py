"""The air-gapped wheelhouse: every wheel the hosts' runtime needs, downloaded once on the control machine.

    python -m tfcluster.wheelhouse [--requirements trainer/requirements.txt] [--dest .cache/lab/wheelhouse]

Lab hosts (and air-gapped on-prem hosts) have no route to an index: the python_runtime role copies this directory
to each host and installs with ``pip --no-index --find-links``. The wheels are chosen for the hosts' platform
(Debian 12: CPython 3.11, glibc 2.36, x86_64), not the control machine's, so any control machine can build it.
A stamp (sha256 of the requirements and the target) makes a second run a no-op.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[1]
DEFAULT_REQUIREMENTS = REPO / "trainer" / "requirements.txt"
DEFAULT_DEST = REPO / ".cache" / "lab" / "wheelhouse"
STAMP = ".tfcluster-wheelhouse"


@dataclass(frozen=True)
class Target:
    """The hosts' interpreter and platform (Debian 12 bookworm by default)."""

    python_version: str = "3.11"
    implementation: str = "cp"
    glibc_minor: int = 36  # glibc 2.36
    arch: str = "x86_64"

    def platforms(self) -> list[str]:
        """Every manylinux tag the hosts accept (pip 23 does not expand ``manylinux_2_36`` to older ones)."""
        tags = [f"manylinux_2_{minor}_{self.arch}" for minor in range(self.glibc_minor, 4, -1)]
        legacy = ("manylinux2014", "manylinux2010", "manylinux1", "linux")
        return [*tags, *(f"{name}_{self.arch}" for name in legacy)]

    def pip_args(self) -> list[str]:
        args = ["--only-binary=:all:", "--python-version", self.python_version, "--implementation",
                self.implementation]
        for tag in self.platforms():
            args += ["--platform", tag]
        return args


def stamp_text(requirements: Path, target: Target) -> str:
    digest = hashlib.sha256(requirements.read_bytes())
    digest.update(repr(target).encode())
    return digest.hexdigest()


def download_argv(python: str, requirements: Path, dest: Path, target: Target) -> list[str]:
    return [python, "-m", "pip", "download", "--disable-pip-version-check", "--no-input", "-q", "-r",
            str(requirements), "--dest", str(dest), *target.pip_args()]


def build(requirements: Path = DEFAULT_REQUIREMENTS, dest: Path = DEFAULT_DEST, target: Target = Target(),
          python: str = sys.executable, force: bool = False) -> bool:
    """Download the wheels into ``dest``; returns False when the stamp says it is already complete."""
    if not requirements.is_file():
        raise FileNotFoundError(f"requirements file {requirements} does not exist")
    want = stamp_text(requirements, target)
    stamp = dest / STAMP
    if not force and stamp.is_file() and stamp.read_text().strip() == want:
        log.info("wheelhouse %s is up to date", dest)
        return False
    partial = dest.with_name(dest.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    started = time.monotonic()
    proc = subprocess.run(download_argv(python, requirements, partial, target), capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        raise RuntimeError(f"pip download for the wheelhouse failed (exit {proc.returncode}):\n"
                           f"{proc.stderr.strip()[-2000:]}")
    (partial / STAMP).write_text(want + "\n")
    shutil.rmtree(dest, ignore_errors=True)
    partial.rename(dest)
    log.info("wheelhouse %s: %d wheels, %.0f MB in %.1f s", dest, len(list(dest.glob("*.whl"))),
             size_bytes(dest) / 1e6, time.monotonic() - started)
    return True


def size_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requirements", type=Path, default=DEFAULT_REQUIREMENTS)
    parser.add_argument("--dest", type=Path, default=DEFAULT_DEST)
    parser.add_argument("--force", action="store_true", help="download again even when the stamp matches")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        build(args.requirements, args.dest, force=args.force)
    except (OSError, RuntimeError) as exc:
        log.error("%s", exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
