"""The air-gapped wheelhouse: every wheel the hosts' runtime needs, downloaded once on the control machine.

    python -m tfcluster.prepare.wheelhouse [--gpu] [--dest .cache/lab/wheelhouse]

Lab hosts (and air-gapped on-prem hosts) have no route to an index: the python_runtime role copies this directory
to each host and installs with ``pip install --no-index --find-links DIR --require-hashes --no-deps -r LOCK``.
The wheels are exactly the hash-pinned lock's (:mod:`tfcluster.prepare.lock`): ``pip download --require-hashes``, then
every wheel checked against the lock's sha256 values. ``--gpu`` (needed as soon as any host has GPUs) takes the GPU
lock: the CPU set plus ``tensorflow[and-cuda]``'s pinned ``nvidia-*-cu12`` wheels (GBs). The wheels are chosen
for the hosts' platform (Debian 12: CPython 3.11, glibc 2.36, x86_64), not the control machine's. A stamp (the
lock's sha256, the target, gpu) makes a second run a no-op; the role reads it to refuse a CPU-only wheelhouse for
a GPU host.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tfcluster.core.paths import REPO_ROOT
from tfcluster.prepare.lock import CPU_LOCK, GPU_LOCK, check_wheels

log = logging.getLogger(__name__)

REPO = REPO_ROOT
DEFAULT_REQUIREMENTS = CPU_LOCK
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


def lock_for(gpu: bool) -> Path:
    """The lock a wheelhouse is built from: the GPU one as soon as any host has GPUs."""
    return GPU_LOCK if gpu else CPU_LOCK


def stamp_text(requirements: Path, target: Target, gpu: bool = False) -> str:
    digest = hashlib.sha256(requirements.read_bytes())
    digest.update(repr(target).encode())
    return json.dumps({"lock": digest.hexdigest(), "gpu": gpu, "requirements": requirements.name}, sort_keys=True)


def read_stamp(dest: Path) -> dict[str, object]:
    """The stamp of a built wheelhouse ({} when there is none)."""
    try:
        data = json.loads((dest / STAMP).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def download_argv(python: str, requirements: Path, dest: Path, target: Target) -> list[str]:
    return [python, "-m", "pip", "download", "--disable-pip-version-check", "--no-input", "-q", "--require-hashes",
            "--no-deps", "-r", str(requirements), "--dest", str(dest), *target.pip_args()]


def build(requirements: Path | None = None, dest: Path = DEFAULT_DEST, *, target: Target = Target(),
          python: str = sys.executable, force: bool = False, gpu: bool = False) -> bool:
    """Download the lock's wheels into ``dest`` and check each against the lock's hashes; returns False when the
    stamp says it is already complete."""
    requirements = requirements or lock_for(gpu)
    if not requirements.is_file():
        raise FileNotFoundError(f"requirements file {requirements} does not exist")
    want = stamp_text(requirements, target, gpu)
    if not force and read_stamp(dest) == json.loads(want):
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
    check_wheels(partial, [requirements])
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
    parser.add_argument("--requirements", type=Path, default=None,
                        help="a hash-pinned lock (default: the CPU lock, or the GPU lock with --gpu)")
    parser.add_argument("--gpu", action="store_true",
                        help="include the GPU set (tensorflow[and-cuda] and its nvidia-*-cu12 wheels)")
    parser.add_argument("--dest", type=Path, default=DEFAULT_DEST)
    parser.add_argument("--force", action="store_true", help="download again even when the stamp matches")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        build(args.requirements, args.dest, force=args.force, gpu=args.gpu)
    except (OSError, RuntimeError, ValueError) as exc:
        log.error("%s", exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
