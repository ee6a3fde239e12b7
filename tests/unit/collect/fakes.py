"""What the collector tests put in place of the real `ssh`."""

from __future__ import annotations

from pathlib import Path


def install_ssh(directory: Path, script: str) -> Path:
    """An executable ``ssh`` in ``directory`` (created) running ``script``; the directory, to put first on PATH."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "ssh").write_text(script)
    (directory / "ssh").chmod(0o755)
    return directory
