"""The outer machine's inotify limits are raised for a lab, never lowered, and a refusal names the sysctl."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.config import LabError
from lab.system import ensure_inotify


def _limits(root: Path, **values: int) -> Path:
    for name, value in values.items():
        (root / name).write_text(f"{value}\n")
    return root


def test_a_low_limit_is_raised_to_the_floor_and_a_higher_one_kept(tmp_path: Path) -> None:
    root = _limits(tmp_path, max_user_instances=128, max_user_watches=1_000_000)
    now = ensure_inotify(root, {"max_user_instances": 1024, "max_user_watches": 524288})
    assert now == {"max_user_instances": 1024, "max_user_watches": 1_000_000}
    assert (root / "max_user_instances").read_text().strip() == "1024"
    assert (root / "max_user_watches").read_text().strip() == "1000000"


def test_a_limit_that_cannot_be_raised_names_the_sysctl_to_set(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    root = _limits(tmp_path, max_user_instances=128)

    def refuse(self: Path, *args: object, **kwargs: object) -> int:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "write_text", refuse)  # as /proc/sys is in a container without CAP_SYS_ADMIN
    with pytest.raises(LabError, match=r"is 128; .*sysctl -w fs\.inotify\.max_user_instances=1024"):
        ensure_inotify(root, {"max_user_instances": 1024})
