"""Locks of the control machine: one train/collect/prune per cluster and job, and the cluster lock that keeps a destroy
(or a provision) apart from a train, collect or stop of the same cluster."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tfcluster.cli.command import (
    CommandError,
)
from tfcluster.cli.settings import Settings
from tfcluster.core import paths


@contextmanager
def job_lock(settings: Settings) -> Iterator[None]:
    """One `make train`/`make collect` at a time per cluster and job (a second one is refused, naming the first)."""
    directory = paths.job_dir(settings.cluster, settings.job)
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "a+", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "?"
            raise CommandError(f"another train/collect of job {settings.job} on CLUSTER={settings.cluster} is running "
                               f"(pid {holder}). Fix: wait for it, or `make stop` it") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        yield

def _holders(lock: Path) -> list[str]:
    """``PID COMMAND`` of each live process that holds a cluster lock shared (its ``<lock>.<pid>`` file)."""
    found = []
    for path in sorted(lock.parent.glob(f"{lock.name}.*")):
        pid = path.name.rpartition(".")[2]
        try:
            os.kill(int(pid), 0)
        except (ProcessLookupError, ValueError):
            continue  # ended without cleaning up (killed), or not a holder's file
        except PermissionError:
            pass  # alive, another user's
        try:
            found.append(path.read_text(encoding="utf-8", errors="replace").strip()[:200] or pid)
        except OSError:
            continue
    return found

@contextmanager
def cluster_lock(settings: Settings, command: str, *, exclusive: bool = False) -> Iterator[None]:
    """One lock per cluster, artifacts/<cluster>/.cluster-<name>.lock: `make train`, `collect` and `stop` hold it
    shared (any number at once), `make destroy` alone; whoever comes second is refused at once, told who holds it.
    A shared holder names itself in ``<lock>.<pid>`` (removed when it lets go), the exclusive one in the lock."""
    lock = paths.cluster_lock_file(settings.cluster, settings.cluster_name)
    lock.parent.mkdir(parents=True, exist_ok=True)
    me = f"pid {os.getpid()}: tfcluster {command}" + ("" if exclusive else f" JOB={settings.job}")
    with open(lock, "a+", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        except BlockingIOError:
            if exclusive:
                held = "; ".join(_holders(lock)) or "a process that has not named itself yet"
                raise CommandError(f"CLUSTER={settings.cluster} ({settings.cluster_name}) is in use ({held}). Fix: "
                                   "wait for it to end, or `make stop JOB=<job>` a running train, then destroy "
                                   "again") from None
            handle.seek(0)
            raise CommandError(f"CLUSTER={settings.cluster} ({settings.cluster_name}) is being destroyed "
                               f"({handle.read().strip()[:200] or '?'}). Fix: wait for the destroy to end (then "
                               "`make provision` to use the cluster again)") from None
        if exclusive:
            for stale in lock.parent.glob(f"{lock.name}.*"):  # no shared holder is left: what remains is stale
                stale.unlink(missing_ok=True)
            handle.seek(0)
            handle.truncate()
            handle.write(me + "\n")
            handle.flush()
            yield
            return
        mine = lock.with_name(f"{lock.name}.{os.getpid()}")
        mine.write_text(me + "\n", encoding="utf-8")
        try:
            yield
        finally:
            mine.unlink(missing_ok=True)
