"""Hash-pinned host requirements (tfcluster/lock.py) and the air-gapped wheelhouse (tfcluster/wheelhouse.py).

The GPU set (tensorflow[and-cuda] and its nvidia-*-cu12 wheels, GBs) is proven to resolve from the pinned wheels
alone without downloading them: metadata-only stand-in wheels, generated from the real pinned names, versions and
requirements (recorded in requirements-gpu.metadata.json by `python -m tfcluster.lock compile`), go into a
directory that pip resolves from with --no-index. An opt-in test (TFCLUSTER_REAL_GPU_WHEELHOUSE=1) does the same with
the real wheels.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tfcluster import lock, wheelhouse

METADATA = json.loads(lock.GPU_METADATA.read_text())


def pins(path: Path) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for pin in lock.read_lock(path):
        found.setdefault(pin.name, set()).add(pin.version)
    return found


def top_level() -> dict[str, str]:
    reqs = [Requirement(line) for line in lock.CPU_IN.read_text().splitlines() if line and not line.startswith("#")]
    return {lock.normalise(r.name): str(r.specifier).lstrip("=") for r in reqs}


def test_every_lock_entry_is_pinned_with_hashes_and_matches_the_inputs() -> None:
    cpu, gpu = pins(lock.CPU_LOCK), pins(lock.GPU_LOCK)
    for name, version in top_level().items():
        assert cpu.get(name) == {version} and gpu.get(name) == {version}, name
    assert all(p.hashes for p in lock.read_lock(lock.GPU_LOCK))
    assert not any(n.startswith("nvidia-") for n in cpu)


def test_the_gpu_lock_pins_every_cuda_wheel_tensorflow_asks_for_within_its_ranges() -> None:
    gpu = pins(lock.GPU_LOCK)
    wanted = [Requirement(r) for r in METADATA["requires"]["tensorflow==2.21.0"]
              if Requirement(r).marker and Requirement(r).marker.evaluate({"extra": "and-cuda"})
              and lock.normalise(Requirement(r).name).startswith("nvidia-")]
    assert len(wanted) >= 10
    for req in wanted:
        versions = gpu.get(lock.normalise(req.name), set())
        assert len(versions) == 1 and req.specifier.contains(next(iter(versions))), (req, versions)


def test_the_recorded_metadata_belongs_to_this_lock() -> None:
    assert METADATA["lock_sha256"] == hashlib.sha256(lock.GPU_LOCK.read_bytes()).hexdigest(), \
        "run `python -m tfcluster.lock compile` after changing a lock"


def stand_in(directory: Path, name: str, version: str, requires: list[str]) -> None:
    """A wheel with the real name, version and requirements, and no content."""
    dist = f"{name.replace('-', '_')}-{version}"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires)
    # extras the requirements use must be declared for pip to honour them
    extras = sorted({m.split("extra ==")[1].strip().strip("\"'") for r in requires
                     for m in [str(Requirement(r).marker or "")] if "extra ==" in m})
    meta += "".join(f"Provides-Extra: {e}\n" for e in extras)
    with zipfile.ZipFile(directory / f"{dist}-py3-none-any.whl", "w") as wheel:
        wheel.writestr(f"{dist}.dist-info/METADATA", meta)
        wheel.writestr(f"{dist}.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        wheel.writestr(f"{dist}.dist-info/RECORD", "")


def resolve(directory: Path, tmp: Path) -> subprocess.CompletedProcess[str]:
    constraints = tmp / "constraints.txt"
    constraints.write_text(lock.constraints_text(lock.read_lock(lock.GPU_LOCK)))
    return subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-index",
                           "--no-cache-dir", "--find-links", str(directory), "-r", str(lock.GPU_IN), "-c",
                           str(constraints), "--report", str(tmp / "report.json"), "-q"],
                          capture_output=True, text=True, check=False, env={**os.environ, "PIP_FIND_LINKS": "",
                                                                            "PIP_EXTRA_INDEX_URL": ""})


def test_the_gpu_set_resolves_from_the_pinned_wheels_alone(tmp_path: Path) -> None:
    wheels = tmp_path / "wheelhouse"
    wheels.mkdir()
    for key, requires in METADATA["requires"].items():
        name, version = key.split("==")
        stand_in(wheels, name, version, requires)
    proc = resolve(wheels, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    installed = {lock.normalise(i["metadata"]["name"]): i["metadata"]["version"]
                 for i in json.loads((tmp_path / "report.json").read_text())["install"]}
    gpu = pins(lock.GPU_LOCK)
    cuda = {n for n in gpu if n.startswith("nvidia-") and n.endswith("-cu12")}
    assert cuda and cuda <= set(installed)
    assert all(installed[n] in gpu[n] for n in installed)
    # the proof can fail: without one CUDA wheel the set does not resolve
    (wheels / next(p.name for p in wheels.iterdir() if p.name.startswith("nvidia_cudnn_cu12"))).unlink()
    assert resolve(wheels, tmp_path).returncode != 0


def fake_pip(tmp: Path, wheels: dict[str, bytes]) -> str:
    """A `python` whose `-m pip download ... --dest DIR` writes the given wheel files and logs its argv."""
    (tmp / "wheels.json").write_text(json.dumps({k: v.hex() for k, v in wheels.items()}))
    script = tmp / "fake-python"
    script.write_text(f"#!{sys.executable}\nimport json, sys, pathlib\n"
                      f"open({str(tmp / 'argv.json')!r}, 'w').write(json.dumps(sys.argv[1:]))\n"
                      "dest = pathlib.Path(sys.argv[sys.argv.index('--dest') + 1])\n"
                      f"for name, data in json.load(open({str(tmp / 'wheels.json')!r})).items():\n"
                      "    (dest / name).write_bytes(bytes.fromhex(data))\n")
    script.chmod(0o755)
    return str(script)


def test_a_gpu_wheelhouse_is_built_from_the_gpu_lock_and_checked(tmp_path: Path) -> None:
    """The bug: the wheelhouse left out tensorflow[and-cuda]'s wheels, so an air-gapped GPU install could not work."""
    lockfile = tmp_path / "gpu.lock"
    data = b"wheel bytes"
    lockfile.write_text(f"nvidia-nccl-cu12==2.32.3 \\\n    --hash=sha256:{hashlib.sha256(data).hexdigest()}\n")
    python = fake_pip(tmp_path, {"nvidia_nccl_cu12-2.32.3-py3-none-manylinux_2_18_x86_64.whl": data})
    assert wheelhouse.build(lockfile, tmp_path / "wh", python=python, gpu=True)
    argv = json.loads((tmp_path / "argv.json").read_text())
    assert {"--require-hashes", "--no-deps"} <= set(argv) and argv[argv.index("-r") + 1] == str(lockfile)
    assert wheelhouse.read_stamp(tmp_path / "wh")["gpu"] is True
    assert not wheelhouse.build(lockfile, tmp_path / "wh", python=python, gpu=True)  # the stamp: a no-op
    assert wheelhouse.lock_for(gpu=True) == lock.GPU_LOCK and wheelhouse.lock_for(gpu=False) == lock.CPU_LOCK


def test_a_wheel_whose_hash_the_lock_does_not_list_is_refused(tmp_path: Path) -> None:
    lockfile = tmp_path / "gpu.lock"
    lockfile.write_text(f"nvidia-nccl-cu12==2.32.3 \\\n    --hash=sha256:{'0' * 64}\n")
    python = fake_pip(tmp_path, {"nvidia_nccl_cu12-2.32.3-py3-none-manylinux_2_18_x86_64.whl": b"evil"})
    with pytest.raises(lock.LockError, match="sha256 the lock does not list"):
        wheelhouse.build(lockfile, tmp_path / "wh", python=python, gpu=True)
    assert not (tmp_path / "wh").exists()


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("TFCLUSTER_REAL_GPU_WHEELHOUSE") != "1",
                    reason="downloads the real GPU wheels (~3 GB): set TFCLUSTER_REAL_GPU_WHEELHOUSE=1")
def test_the_real_gpu_wheelhouse_installs_air_gapped(tmp_path: Path) -> None:
    dest = Path(os.environ.get("TFCLUSTER_GPU_WHEELHOUSE", str(tmp_path / "wheelhouse")))
    wheelhouse.build(dest=dest, gpu=True)
    assert lock.check_wheels(dest, [lock.GPU_LOCK]) > 40
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-index",
                           "--find-links", str(dest), "--require-hashes", "--no-deps", "-r", str(lock.GPU_LOCK)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
