"""Hash-pinned requirements for the hosts: generate the lock files, read them, check wheels against them.

    python -m tfcluster.lock compile     # the hashed locks + requirements-gpu.metadata.json (needs uv and PyPI)
    python -m tfcluster.lock check DIR   # every wheel in DIR is pinned, with a listed sha256, in the locks

Inputs (written by hand): ``trainer/requirements.txt`` (what every host runs) and ``requirements-gpu.in`` (the same
plus ``tensorflow[and-cuda]``, whose ``nvidia-*-cu12`` wheels TensorFlow asks for by ranges only). Outputs
(generated, committed), like the GPU input in ``playbooks/roles/python_runtime/files/`` (the role that installs
them): ``requirements.lock`` and ``requirements-gpu.lock``, every package
and every transitive one pinned with the sha256 of each of its files on PyPI, for every supported host Python and
platform (``uv pip compile --universal --generate-hashes``). The GPU lock is the constraint that pins the CUDA
wheels. Hosts install with ``pip install --require-hashes --no-deps -r LOCK``: nothing unpinned, nothing unhashed.
``requirements-gpu.metadata.json`` records each pinned GPU package's requirements (PyPI's JSON API), so a test can
prove the GPU set resolves from the pinned wheels alone without downloading gigabytes.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.request
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tfcluster.files import atomic_write_json, sha256_file

REPO = Path(__file__).resolve().parents[1]
LOCKS = REPO / "playbooks" / "roles" / "python_runtime" / "files"  # the role that installs them
CPU_IN = REPO / "trainer" / "requirements.txt"
GPU_IN = LOCKS / "requirements-gpu.in"
CPU_LOCK = LOCKS / "requirements.lock"
GPU_LOCK = LOCKS / "requirements-gpu.lock"
GPU_METADATA = LOCKS / "requirements-gpu.metadata.json"
INDEX = "https://pypi.org/simple"
MIN_PYTHON = "3.10"  # Ubuntu 22.04's; Debian 12 has 3.11, Ubuntu 24.04 3.12
COMPILE = ("pip", "compile", "--no-config", "--universal", "--python-version", MIN_PYTHON, "--generate-hashes",
           "--no-header", "--index-url", INDEX)
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;\\]+)\s*(?:;\s*([^\\]+?))?\s*\\?$")
_HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")


class LockError(ValueError):
    """A lock file or a wheel does not match; the message names it and the fix."""


@dataclass(frozen=True)
class Pin:
    name: str  # normalised (PEP 503)
    version: str
    marker: str
    hashes: frozenset[str]


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_lock(text: str) -> list[Pin]:
    """Every ``NAME==VERSION [; marker]`` entry of a hashed requirements file with its ``--hash`` values."""
    pins: list[Pin] = []
    current: tuple[str, str, str] | None = None
    hashes: set[str] = set()
    for raw in [*text.splitlines(), ""]:
        line = raw.strip()
        match = _PIN.match(line)
        if match or not line or line.startswith("#"):
            if current:
                pins.append(Pin(*current, frozenset(hashes)))
            current, hashes = (None, set())
        if match:
            current = (normalise(match.group(1)), match.group(2), (match.group(3) or "").strip())
        hashes.update(_HASH.findall(line))
    return pins


def read_lock(path: Path) -> list[Pin]:
    pins = parse_lock(path.read_text(encoding="utf-8"))
    unhashed = [p.name for p in pins if not p.hashes]
    if not pins or unhashed:
        raise LockError(f"{path} has no pins or pins without --hash ({', '.join(unhashed[:5])}). Fix: run "
                        "`python -m tfcluster.lock compile`")
    return pins


def wheel_pin(filename: str) -> tuple[str, str]:
    """(normalised name, version) of a wheel's file name."""
    parts = filename[:-4].split("-") if filename.endswith(".whl") else []
    if len(parts) < 5:
        raise LockError(f"{filename} is not a wheel file name")
    return normalise(parts[0]), parts[1]


def check_wheels(directory: Path, locks: Iterable[Path]) -> int:
    """Every wheel in ``directory`` is pinned in one of ``locks`` and its sha256 is one the lock lists; the count."""
    allowed: dict[tuple[str, str], set[str]] = {}
    for lock in locks:
        for pin in read_lock(lock):
            allowed.setdefault((pin.name, pin.version), set()).update(pin.hashes)
    wheels = sorted(directory.glob("*.whl"))
    problems = []
    for wheel in wheels:
        key = wheel_pin(wheel.name)
        if key not in allowed:
            problems.append(f"{wheel.name} is not pinned in the lock")
        elif sha256_file(wheel) not in allowed[key]:
            problems.append(f"{wheel.name} has a sha256 the lock does not list")
    if problems:
        raise LockError(f"the wheelhouse {directory} does not match the lock: {'; '.join(problems[:10])}. Fix: "
                        "rebuild it (python -m tfcluster.wheelhouse --force)")
    return len(wheels)


def constraints_text(pins: Sequence[Pin]) -> str:
    """The pins as a constraints file without hashes (for a resolution check against stand-in wheels)."""
    return "".join(f"{p.name}=={p.version}{' ; ' + p.marker if p.marker else ''}\n" for p in pins)


def _uv() -> str:
    found = shutil.which("uv") or (str(Path(sys.executable).parent / "uv")
                                   if (Path(sys.executable).parent / "uv").exists() else None)
    if not found:
        raise LockError("`uv` is not installed. Fix: pip install uv (requirements-dev.txt pins it)")
    return found


def compile_lock(source: Path, output: Path) -> None:
    """``uv pip compile`` run beside ``output`` (its '# via' notes then name files relative to the locks)."""
    proc = subprocess.run([_uv(), *COMPILE, os.path.relpath(source, output.parent), "-o", output.name],
                          cwd=output.parent, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise LockError(f"uv pip compile {source.name} failed: {proc.stderr.strip()[-1500:]}")


def _wheel_rank(filename: str) -> int:
    """Prefer the wheel a Debian 12 x86_64 host would take (its metadata is what the stand-ins copy)."""
    return 0 if "cp311" in filename and "x86_64" in filename else 1 if "none-any" in filename else 2


class _RangeFile(io.RawIOBase):
    """A remote file read with HTTP Range requests (enough of a file for :mod:`zipfile` to read one member)."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url, self.pos = url, 0
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=60) as answer:
            self.size = int(answer.headers["Content-Length"])

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = {0: offset, 1: self.pos + offset, 2: self.size + offset}[whence]
        return self.pos

    def read(self, size: int = -1) -> bytes:
        end = self.size if size < 0 else min(self.size, self.pos + size)
        if end <= self.pos:
            return b""
        request = urllib.request.Request(self.url, headers={"Range": f"bytes={self.pos}-{end - 1}"})
        with urllib.request.urlopen(request, timeout=120) as answer:
            data = answer.read()
        self.pos += len(data)
        return data


def wheel_metadata(url: str) -> str:
    """A wheel's METADATA, read through HTTP ranges: the central directory and one member, not the wheel."""
    with zipfile.ZipFile(_RangeFile(url)) as wheel:  # type: ignore[arg-type]
        name = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
        return wheel.read(name).decode("utf-8")


def pypi_requires(name: str, version: str) -> list[str]:
    """Requires-Dist of a pinned release, from one of its wheels' METADATA (no whole-wheel download)."""
    request = urllib.request.Request(f"{INDEX}/{name}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=60) as answer:
        files = json.load(answer)["files"]
    stem = f"{name.replace('-', '_')}-{version}-".lower()
    wheels = sorted((f for f in files if f["filename"].lower().startswith(stem) and f["filename"].endswith(".whl")),
                    key=lambda f: _wheel_rank(f["filename"]))
    if not wheels:
        raise LockError(f"{name}=={version} has no wheel on {INDEX}")
    text = wheel_metadata(wheels[0]["url"])
    return [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Requires-Dist:")]


def write_metadata(lock: Path, output: Path) -> None:
    entries = {f"{p.name}=={p.version}": pypi_requires(p.name, p.version) for p in read_lock(lock)}
    atomic_write_json(output, {"lock_sha256": hashlib.sha256(lock.read_bytes()).hexdigest(), "requires": entries})


def compile_all() -> None:
    compile_lock(CPU_IN, CPU_LOCK)
    compile_lock(GPU_IN, GPU_LOCK)
    write_metadata(GPU_LOCK, GPU_METADATA)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tfcluster.lock", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("compile", help="regenerate the hashed locks and the GPU metadata (uv, PyPI)")
    sub.add_parser("check", help="check the wheels of a directory against the locks").add_argument("dir", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "compile":
            compile_all()
            print(json.dumps({"locks": [str(CPU_LOCK), str(GPU_LOCK)], "metadata": str(GPU_METADATA)}))
        else:
            print(json.dumps({"checked": check_wheels(args.dir, [CPU_LOCK, GPU_LOCK]), "dir": str(args.dir)}))
    except (LockError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


def pins_by_name(pins: Iterable[Pin]) -> Mapping[str, list[Pin]]:
    found: dict[str, list[Pin]] = {}
    for pin in pins:
        found.setdefault(pin.name, []).append(pin)
    return found


if __name__ == "__main__":
    sys.exit(main())
