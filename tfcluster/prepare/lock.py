"""Hash-pinned requirements for the hosts: generate the lock files, read them, check wheels against them.

    python -m tfcluster.prepare.lock compile     # the hashed locks + requirements-gpu.metadata.json (needs uv and PyPI)
    python -m tfcluster.prepare.lock check DIR   # every wheel in DIR is pinned, with a listed sha256, in the locks
    python -m tfcluster.prepare.lock script [FILE]  # FILE.lock: a SCRIPT's requirements, hashed, less the runtime's
    python -m tfcluster.prepare.lock control     # requirements-control.lock: the control machine's ranges, hashed

Inputs (written by hand): ``trainer/requirements.txt`` (what every host runs) and ``requirements-gpu.in`` (the same
plus ``tensorflow[and-cuda]``, whose ``nvidia-*-cu12`` wheels TensorFlow asks for by ranges only). Outputs
(generated, committed), like the GPU input in ``playbooks/roles/python_runtime/files/`` (the role that installs
them): ``requirements.lock`` and ``requirements-gpu.lock``, every package
and every transitive one pinned with the sha256 of each of its files on PyPI, for every supported host Python and
platform (``uv pip compile --universal --generate-hashes``). The GPU lock is the constraint that pins the CUDA
wheels. Hosts install with ``pip install --require-hashes --no-deps -r LOCK``: nothing unpinned, nothing unhashed.
``requirements-gpu.metadata.json`` records each pinned GPU package's requirements (PyPI's JSON API), so a test can
prove the GPU set resolves from the pinned wheels alone without downloading gigabytes. ``compile`` also checks that
every pin has a wheel for every host Python and platform (hosts install with ``--only-binary :all:``).

A SCRIPT job's requirements (``make lock SCRIPT_REQUIREMENTS=FILE`` runs ``script``): ``FILE.lock`` is compiled the
same way with the runtime's locks as constraints, and leaves out every package the runtime pins, so the job's own
packages (installed with ``pip install --require-hashes --only-binary :all: --no-deps --target DIR``, DIR on the
job's PYTHONPATH after the release) never shadow the runtime's. :func:`script_lock_problem` is the check the
``tfcluster`` command and the release staging run on ``SCRIPT_REQUIREMENTS``: only ``NAME==VERSION`` entries with
``--hash=sha256:`` values, none the runtime pins, no options.
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
import tempfile
import urllib.request
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tfcluster.core.contract import Problem
from tfcluster.core.files import atomic_write_json, atomic_write_text, sha256_file
from tfcluster.core.paths import REPO_ROOT, ROLES

REPO = REPO_ROOT
LOCKS = ROLES / "python_runtime" / "files"  # the role that installs them
CPU_IN = REPO / "trainer" / "requirements.txt"
GPU_IN = LOCKS / "requirements-gpu.in"
CPU_LOCK = LOCKS / "requirements.lock"
GPU_LOCK = LOCKS / "requirements-gpu.lock"
GPU_METADATA = LOCKS / "requirements-gpu.metadata.json"
CONTROL_IN = REPO / "requirements-control.txt"
CONTROL_LOCK = REPO / "requirements-control.lock"
INDEX = "https://pypi.org/simple"
MIN_PYTHON = "3.10"  # Ubuntu 22.04's; Debian 12 has 3.11, Ubuntu 24.04 3.12
CONTROL_PYTHON = "3.11"  # the control machine: ansible-core 2.19 (requirements-control.txt) needs 3.11
COMPILE = ("pip", "compile", "--no-config", "--universal", "--python-version", MIN_PYTHON, "--generate-hashes",
           "--no-header", "--index-url", INDEX)
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;\\]+)\s*(?:;\s*([^\\]+?))?\s*\\?$")
_HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")
# The hosts (docs/playbooks.md "Where it runs"): Ubuntu 22.04 (3.10, glibc 2.35), Debian 12 (3.11), Ubuntu 24.04
# (3.12); x86_64 and arm64. Every pin of a runtime lock must have a wheel for each.
HOST_PYTHONS: tuple[str, ...] = ("3.10", "3.11", "3.12")
HOST_PLATFORMS: tuple[str, ...] = ("x86_64-manylinux_2_35", "aarch64-manylinux_2_35")
# One entry of a script lock, its continuation lines joined: NAME[extras]==VERSION [; marker] --hash=sha256:... ...
_ENTRY = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[A-Za-z0-9._, -]*\])?==([A-Za-z0-9.+!_-]+)"
                    r"(?: ?;(?P<marker>[^-]*?))?(?P<hashes>(?: --hash=sha256:[0-9a-f]{64})+)")


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
                        "`python -m tfcluster.prepare.lock compile`")
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
                        "rebuild it (python -m tfcluster.prepare.wheelhouse --force)")
    return len(wheels)


def constraints_text(pins: Sequence[Pin]) -> str:
    """The pins as a constraints file without hashes (for a resolution check against stand-in wheels)."""
    return "".join(f"{p.name}=={p.version}{' ; ' + p.marker if p.marker else ''}\n" for p in pins)


def logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, content) of each line of a requirements file as pip reads it: comments dropped,
    continuation lines joined, whitespace collapsed, blank lines left out."""
    found: list[tuple[int, str]] = []
    parts: list[str] = []
    start = 0
    for number, raw in enumerate([*text.splitlines(), ""], 1):
        line = re.sub(r"(?:^|\s)#.*$", "", raw).rstrip()
        start = start if parts else number
        continued = line.endswith("\\")
        parts.append(line[:-1] if continued else line)
        if not continued:
            joined = " ".join(" ".join(parts).split())
            if joined:
                found.append((start, joined))
            parts = []
    return found


def script_entries(text: str) -> tuple[list[Pin], list[str]]:
    """The pins of a script lock, and each line that is not ``NAME==VERSION [; marker] --hash=sha256:...``."""
    pins: list[Pin] = []
    bad: list[str] = []
    for number, line in logical_lines(text):
        match = _ENTRY.fullmatch(line)
        if match:
            pins.append(Pin(normalise(match.group(1)), match.group(2), (match.group("marker") or "").strip(),
                            frozenset(_HASH.findall(match.group("hashes")))))
        else:
            bad.append(f"line {number} ({line[:60]!r}) is not NAME==VERSION with --hash=sha256 values")
    return pins, bad


def runtime_names() -> set[str]:
    """Every package the runtime pins (either lock): a script lock may not pin them again."""
    return {pin.name for lock in (CPU_LOCK, GPU_LOCK) for pin in read_lock(lock)}


def lock_source(path: Path) -> Path:
    """The file a script lock is compiled from: ``FILE`` when it exists beside ``FILE.lock``, else ``path``."""
    plain = path.with_suffix("")
    return plain if path.suffix == ".lock" and plain.is_file() else path


def script_lock_problem(path: Path, runtime: Iterable[str] | None = None,
                        field: str = "SCRIPT_REQUIREMENTS") -> Problem | None:
    """Why ``path`` cannot be a SCRIPT's requirements (None when it can): every entry pinned with hashes, none of
    the runtime's packages (they would shadow the runtime's on the job's PYTHONPATH), no options."""
    source = lock_source(path)
    fix = (f"run `make lock SCRIPT_REQUIREMENTS={source}` (it writes {source}.lock: hash-pinned, without the "
           f"runtime's packages) and pass SCRIPT_REQUIREMENTS={source}.lock")
    if not path.is_file():
        return Problem(field, f"{path} is not a file", "point SCRIPT_REQUIREMENTS at a requirements file")
    try:
        pins, bad = script_entries(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        return Problem(field, f"{path} cannot be read ({exc})", fix)
    if bad:
        return Problem(field, f"{path} is not hash-pinned: {'; '.join(bad[:5])}", fix)
    shadowing = sorted({pin.name for pin in pins} & set(runtime_names() if runtime is None else runtime))
    if shadowing:
        more = f" and {len(shadowing) - 8} more" if len(shadowing) > 8 else ""
        return Problem(field, f"{path} pins {', '.join(shadowing[:8])}{more}, which the runtime already provides "
                       "(python_runtime's locks): the job's copy would shadow the runtime's", fix)
    return None


def _runtime_constraints(directory: Path) -> tuple[Path, list[str]]:
    """The runtime's pins as a constraints file in ``directory`` (both locks, each line once) and their names."""
    pins = [*read_lock(CPU_LOCK), *read_lock(GPU_LOCK)]
    path = directory / "runtime-constraints.txt"
    path.write_text("".join(dict.fromkeys(constraints_text(pins).splitlines(keepends=True))), encoding="utf-8")
    return path, sorted({pin.name for pin in pins})


SCRIPT_HEADER = """\
# Hash-pinned by `make lock SCRIPT_REQUIREMENTS={source}` (python -m tfcluster.prepare.lock script), from {source}.
# Every entry is pinned with the sha256 of each of its files; what the runtime pins (python_runtime's locks) is left
# out: the job imports the runtime's. Train with SCRIPT_REQUIREMENTS={lock}.
"""
CONTROL_HEADER = """\
# Hash-pinned by `make lock-control` (python -m tfcluster.prepare.lock control) from requirements-control.txt's ranges,
# for Python 3.11 to 3.13 (ansible-core 2.19 needs 3.11). `TFCLUSTER_LOCKED=1 tools/setup.sh control` installs it with
# pip install --require-hashes (an sdist's build dependencies are not hash-checked: python-terraform has no wheel).
"""


def _with_header(header: str, text: str) -> str:
    body = text.lstrip("\n")
    return header + (body if body.strip() else "# (no entries: the runtime provides every package asked for)\n")


def compile_script_lock(source: Path, output: Path | None = None,
                        index: Sequence[str] = ("--index-url", INDEX)) -> Path:
    """``source`` hash-pinned into ``output`` (default ``source.lock``) with the runtime's pins as constraints,
    wheels only, and the runtime's own packages left out; checked with :func:`script_lock_problem`."""
    output = output or source.with_name(source.name + ".lock")
    with tempfile.TemporaryDirectory(prefix="tfcluster-lock-") as tmp:
        constraints, names = _runtime_constraints(Path(tmp))
        draft = Path(tmp) / "draft.lock"
        if output.is_file():  # uv keeps an existing lock's pins where they still fit
            shutil.copyfile(output, draft)
        argv = [_uv(), "pip", "compile", "--no-config", "--universal", "--python-version", MIN_PYTHON,
                "--generate-hashes", "--no-header", "--only-binary", ":all:", *index, "-c", str(constraints),
                *[arg for name in names for arg in ("--no-emit-package", name)],
                os.path.relpath(source, output.parent), "-o", str(draft)]
        proc = subprocess.run(argv, cwd=output.parent, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise LockError(f"uv pip compile {source} failed: {proc.stderr.strip()[-1500:]}. Fix: change the "
                            "requirements (wheels only, within the runtime's pins) and run `make lock` again")
        text = _with_header(SCRIPT_HEADER.format(source=source.name, lock=output.name),
                            draft.read_text(encoding="utf-8"))
    atomic_write_text(output, text)
    problem = script_lock_problem(output, names)
    if problem:
        raise LockError(str(problem))
    return output


def _uv_reason(stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    return next((line for line in lines if "Because" in line), lines[-1] if lines else "uv failed")[:400]


def missing_wheels(lock: Path, index: Sequence[str] = ("--index-url", INDEX),
                   pythons: Sequence[str] = HOST_PYTHONS, platforms: Sequence[str] = HOST_PLATFORMS) -> list[str]:
    """Each host Python and platform some pin of ``lock`` has no wheel for, with uv's reason (it reads the index's
    file lists and metadata: nothing is downloaded)."""
    pins = parse_lock(lock.read_text(encoding="utf-8"))
    if not pins:
        return []
    missing: list[str] = []
    with tempfile.TemporaryDirectory(prefix="tfcluster-lock-") as tmp:
        plain = Path(tmp) / "pins.txt"
        plain.write_text(constraints_text(pins), encoding="utf-8")
        for python in pythons:
            for platform in platforms:
                proc = subprocess.run([_uv(), "pip", "compile", "--no-config", "--no-deps", "--only-binary", ":all:",
                                       "--python-version", python, "--python-platform", platform, "--no-header",
                                       *index, str(plain), "-o", os.devnull],
                                      capture_output=True, text=True, check=False)
                if proc.returncode != 0:
                    missing.append(f"Python {python} {platform}: {_uv_reason(proc.stderr)}")
    return missing


def _uv() -> str:
    found = shutil.which("uv") or (str(Path(sys.executable).parent / "uv")
                                   if (Path(sys.executable).parent / "uv").exists() else None)
    if not found:
        raise LockError("`uv` is not installed. Fix: pip install uv (requirements-dev.txt pins it)")
    return found


def compile_lock(source: Path, output: Path, python: str = MIN_PYTHON) -> None:
    """``uv pip compile`` run beside ``output`` (its '# via' notes then name files relative to the locks), for
    ``python`` and newer."""
    argv = [*COMPILE]
    argv[argv.index("--python-version") + 1] = python
    proc = subprocess.run([_uv(), *argv, os.path.relpath(source, output.parent), "-o", output.name],
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
    missing = [f"{lock.name}: {why}" for lock in (CPU_LOCK, GPU_LOCK) for why in missing_wheels(lock)]
    if missing:
        raise LockError(f"hosts install wheels only (--only-binary :all:), and some pins have none: "
                        f"{'; '.join(missing[:6])}. Fix: pin a version with wheels in {CPU_IN.name} (or "
                        f"{GPU_IN.name}) and run `make lock` again")


def compile_control() -> None:
    compile_lock(CONTROL_IN, CONTROL_LOCK, CONTROL_PYTHON)
    atomic_write_text(CONTROL_LOCK, _with_header(CONTROL_HEADER, CONTROL_LOCK.read_text(encoding="utf-8")))
    read_lock(CONTROL_LOCK)


def script_requirements_arg(given: Path | None, env: Mapping[str, str]) -> Path:
    """The requirements file of ``script``: the argument, else $SCRIPT_REQUIREMENTS (relative to $PWD, as the
    ``tfcluster`` command reads it)."""
    raw = str(given) if given else env.get("SCRIPT_REQUIREMENTS", "").strip()
    if not raw:
        raise LockError("no requirements file given. Fix: make lock SCRIPT_REQUIREMENTS=path/to/requirements.txt")
    path = Path(raw).expanduser()
    path = path if path.is_absolute() else Path(env.get("PWD") or Path.cwd()) / path
    if not path.is_file():
        raise LockError(f"{path} is not a file. Fix: point SCRIPT_REQUIREMENTS at your script's requirements file")
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tfcluster.prepare.lock", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("compile", help="regenerate the hashed locks and the GPU metadata (uv, PyPI)")
    sub.add_parser("check", help="check the wheels of a directory against the locks").add_argument("dir", type=Path)
    sub.add_parser("script", help="hash-pin a SCRIPT's requirements into FILE.lock (default $SCRIPT_REQUIREMENTS)"
                   ).add_argument("requirements", type=Path, nargs="?")
    sub.add_parser("control", help="hash-pin requirements-control.txt into requirements-control.lock")
    args = parser.parse_args(argv)
    try:
        if args.command == "compile":
            compile_all()
            print(json.dumps({"locks": [str(CPU_LOCK), str(GPU_LOCK)], "metadata": str(GPU_METADATA)}))
        elif args.command == "script":
            print(json.dumps(_script(script_requirements_arg(args.requirements, os.environ))))
        elif args.command == "control":
            compile_control()
            print(json.dumps({"lock": str(CONTROL_LOCK)}))
        else:
            print(json.dumps({"checked": check_wheels(args.dir, [CPU_LOCK, GPU_LOCK]), "dir": str(args.dir)}))
    except (LockError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


def _script(source: Path) -> dict[str, object]:
    """``make lock SCRIPT_REQUIREMENTS=FILE``: FILE.lock, and a warning per host target a pin has no wheel for."""
    output = compile_script_lock(source)
    for why in missing_wheels(output):
        print(f"warning: {output.name}: hosts with {why} cannot install it", file=sys.stderr)
    return {"lock": str(output), "pins": len(parse_lock(output.read_text(encoding="utf-8")))}


def pins_by_name(pins: Iterable[Pin]) -> Mapping[str, list[Pin]]:
    found: dict[str, list[Pin]] = {}
    for pin in pins:
        found.setdefault(pin.name, []).append(pin)
    return found


if __name__ == "__main__":
    sys.exit(main())
