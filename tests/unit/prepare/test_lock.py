"""Hash-pinned host requirements (tfcluster/prepare/lock.py) and the air-gapped wheelhouse
(tfcluster/prepare/wheelhouse.py).

The GPU set (tensorflow[and-cuda] and its nvidia-*-cu12 wheels, GBs) is proven to resolve from the pinned wheels
alone without downloading them: metadata-only stand-in wheels, generated from the real pinned names, versions and
requirements (recorded in requirements-gpu.metadata.json by `python -m tfcluster.prepare.lock compile`), go into a
directory that pip resolves from with --no-index. An opt-in test (TFCLUSTER_REAL_GPU_WHEELHOUSE=1) does the same with
the real wheels.

A SCRIPT's requirements must be such a lock too, without the runtime's packages: refused before anything runs
otherwise, and `make lock SCRIPT_REQUIREMENTS=FILE` writes one (compiled here offline, against hand-made wheels).
The control machine's ranges have a committed lock beside them.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement

from tfcluster.cli import main as cli
from tfcluster.prepare import lock, release, wheelhouse

METADATA = json.loads(lock.GPU_METADATA.read_text())
MAKE_WHEEL = lock.REPO / "molecule" / "default" / "make_wheel.py"  # writes tfcluster_probe-1.0, a real wheel
HASH = "0123456789abcdef" * 4
ENTRY = f"tabulate==0.10.0 \\\n    --hash=sha256:{HASH}\n"
needs_uv = pytest.mark.skipif(not (Path(sys.executable).parent / "uv").exists() and shutil.which("uv") is None,
                              reason="uv is not installed (requirements-dev.txt pins it)")


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
        "run `python -m tfcluster.prepare.lock compile` after changing a lock"


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


# --- a SCRIPT's requirements ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "expected"), [
    ("tabulate\n", "line 1 ('tabulate') is not NAME==VERSION with --hash=sha256"),
    ("tabulate==0.10.0\n", "line 1 ('tabulate==0.10.0') is not NAME==VERSION with --hash=sha256"),
    (f"tabulate>=0.9 --hash=sha256:{HASH}\n", "is not NAME==VERSION"),
    (f"tabulate==0.10.0 --hash=md5:{HASH[:32]}\n", "is not NAME==VERSION"),
    (f"tabulate @ https://example.invalid/tabulate.whl --hash=sha256:{HASH}\n", "is not NAME==VERSION"),
    (f"-r more.txt\n{ENTRY}", "line 1 ('-r more.txt')"),
    (f"--index-url https://example.invalid/simple\n{ENTRY}", "line 1 ('--index-url https://example.invalid/simple')"),
    (f"{ENTRY}--extra-index-url https://example.invalid/simple\n", "line 3 ('--extra-index-url"),
    (f"{ENTRY}-e ./src\n", "line 3 ('-e ./src')"),
    (f"numpy==2.4.6 \\\n    --hash=sha256:{HASH}\n{ENTRY}", "pins numpy, which the runtime already provides"),
    (f"Six==1.17.0 --hash=sha256:{HASH}\n", "pins six, which the runtime already provides"),
])
def test_a_script_requirements_file_that_is_not_a_clean_lock_is_refused_with_the_fix(
        tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "requirements.txt"
    path.write_text(text)
    problem = lock.script_lock_problem(path)
    assert problem is not None and problem.field == "SCRIPT_REQUIREMENTS"
    assert expected in problem.message and str(path) in problem.message, problem
    assert f"run `make lock SCRIPT_REQUIREMENTS={path}`" in problem.fix
    assert f"pass SCRIPT_REQUIREMENTS={path}.lock" in problem.fix


@pytest.mark.parametrize("text", [
    ENTRY,
    f"# a header\n{ENTRY}    # via -r requirements.txt\n\n",
    f"tabulate[widechars]==0.10.0 ; python_full_version >= '3.10' \\\n    --hash=sha256:{HASH} \\\n"
    f"    --hash=sha256:{HASH[::-1]}\n",
    "# (no entries: the runtime provides every package asked for)\n",
])
def test_a_hashed_lock_of_packages_the_runtime_lacks_is_accepted(tmp_path: Path, text: str) -> None:
    path = tmp_path / "requirements.txt.lock"
    path.write_text(text)
    assert lock.script_lock_problem(path) is None


def test_the_fix_for_a_broken_lock_names_the_file_it_was_made_from(tmp_path: Path) -> None:
    (tmp_path / "requirements.txt").write_text("tabulate\n")
    (tmp_path / "requirements.txt.lock").write_text("tabulate==0.10.0\n")
    problem = lock.script_lock_problem(tmp_path / "requirements.txt.lock")
    assert problem is not None and f"make lock SCRIPT_REQUIREMENTS={tmp_path / 'requirements.txt'}`" in problem.fix


def test_a_script_requirements_without_hashes_is_refused_before_anything_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The bug: the file was pip-installed, unhashed, as root into the shared runtime venv."""
    path = tmp_path / "requirements.txt"
    path.write_text("tabulate\n")
    code = cli.main(["train"], env={"SCRIPT_REQUIREMENTS": "requirements.txt", "PWD": str(tmp_path)})
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"SCRIPT_REQUIREMENTS: {path} is not hash-pinned" in err
    assert f"make lock SCRIPT_REQUIREMENTS={path}" in err and err.rstrip().endswith("Nothing was started.")


def test_the_release_refuses_an_unhashed_requirements_file_for_playbook_runs(tmp_path: Path) -> None:
    """ansible-playbook without the `tfcluster` command: the staging (host_ready, trainer) refuses it first."""
    path = tmp_path / "requirements.txt"
    path.write_text("tabulate\n")
    with pytest.raises(release.ReleaseError, match=r"is not hash-pinned.*make lock SCRIPT_REQUIREMENTS="):
        release.release_sources(lock.REPO, requirements=str(path))
    path.write_text(ENTRY)
    assert ("user/requirements.txt", path) in release.release_sources(lock.REPO, requirements=str(path))


@needs_uv
def test_the_lock_of_a_small_requirements_file_has_hashes_and_leaves_the_runtime_out(tmp_path: Path) -> None:
    links = tmp_path / "links"  # an index of two wheels: offline, like the wheelhouse
    links.mkdir()
    subprocess.run([sys.executable, str(MAKE_WHEEL), str(links)], check=True)
    (six_version,) = pins(lock.CPU_LOCK)["six"]
    stand_in(links, "six", six_version, [])
    source = tmp_path / "requirements.txt"
    source.write_text("tfcluster-probe\nsix\n")
    out = lock.compile_script_lock(source, index=("--no-index", "--find-links", str(links)))
    assert out == tmp_path / "requirements.txt.lock"
    entries, bad = lock.script_entries(out.read_text())
    wheel = links / "tfcluster_probe-1.0-py3-none-any.whl"
    assert bad == [] and [(p.name, p.version) for p in entries] == [("tfcluster-probe", "1.0")]  # six: the runtime's
    assert entries[0].hashes == {hashlib.sha256(wheel.read_bytes()).hexdigest()}
    assert lock.script_lock_problem(out) is None
    assert "make lock SCRIPT_REQUIREMENTS=requirements.txt" in out.read_text()


def test_make_lock_reads_the_requirements_file_from_the_environment(tmp_path: Path) -> None:
    (tmp_path / "req.txt").write_text("tabulate\n")
    assert lock.script_requirements_arg(None, {"SCRIPT_REQUIREMENTS": "req.txt", "PWD": str(tmp_path)}) == \
        tmp_path / "req.txt"
    with pytest.raises(lock.LockError, match=r"make lock SCRIPT_REQUIREMENTS=path/to/requirements\.txt"):
        lock.script_requirements_arg(None, {})


def test_make_lock_checks_the_runtime_locks_for_wheels_on_every_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hosts install with --only-binary :all:: `make lock` asks uv for a wheel of every pin per host target."""
    calls: list[list[str]] = []

    def fake_run(argv: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        platform = argv[argv.index("--python-platform") + 1]
        failed = platform.startswith("aarch64") and "3.12" in argv
        return subprocess.CompletedProcess(argv, 1 if failed else 0, "", "  Because foo==1 has no wheels with a "
                                           "matching platform tag and you require foo==1, ..." if failed else "")
    monkeypatch.setattr(lock.subprocess, "run", fake_run)
    missing = lock.missing_wheels(lock.CPU_LOCK)
    assert len(calls) == len(lock.HOST_PYTHONS) * len(lock.HOST_PLATFORMS)
    assert all({"--only-binary", ":all:", "--no-deps"} <= set(argv) for argv in calls)
    assert missing == ["Python 3.12 aarch64-manylinux_2_35: Because foo==1 has no wheels with a matching platform tag "
                       "and you require foo==1, ..."]


# --- the control machine's lock ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("python", ["3.11", "3.12", "3.13"])  # ansible-core 2.19 needs 3.11
def test_the_control_lock_pins_each_range_of_requirements_control_with_hashes(python: str) -> None:
    wanted = [Requirement(line) for _, line in lock.logical_lines(lock.CONTROL_IN.read_text())]
    environment = {"python_version": python, "python_full_version": f"{python}.0", "sys_platform": "linux",
                   "platform_python_implementation": "CPython", "implementation_name": "cpython"}
    chosen: dict[str, list[str]] = {}
    for pin in lock.read_lock(lock.CONTROL_LOCK):  # raises on an entry without --hash
        if not pin.marker or Marker(pin.marker).evaluate(environment):
            chosen.setdefault(pin.name, []).append(pin.version)
    assert all(len(versions) == 1 for versions in chosen.values()), chosen
    for req in wanted:
        assert req.specifier.contains(chosen[lock.normalise(req.name)][0], prereleases=True), (req, chosen)
