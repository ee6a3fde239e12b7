"""A fake /proc for the host checkers' tests (tfcluster/host/autostop.py and the boot guard's copy)."""

from __future__ import annotations

from pathlib import Path


def fake_proc(root: Path, processes: dict[int, tuple[int, str]], btime: int = 1_799_000_000,
              pid1_start_ticks: int = 0) -> Path:
    """A /proc with `stat` (btime) and per process `stat` (ppid, starttime) and `cmdline`."""
    (root / "stat").write_text(f"cpu  1 2 3\nbtime {btime}\nprocesses 9\n")
    for pid, (ppid, title) in {1: (0, "/sbin/init"), **processes}.items():
        (root / str(pid)).mkdir()
        start = pid1_start_ticks if pid == 1 else 0
        rest = " ".join(["S", str(ppid)] + ["0"] * 17 + [str(start)] + ["0"] * 5)  # starttime: field 22
        (root / str(pid) / "stat").write_text(f"{pid} (a) b) {rest}\n")
        (root / str(pid) / "cmdline").write_bytes(title.encode().replace(b" ", b"\0") + b"\0")
    return root
