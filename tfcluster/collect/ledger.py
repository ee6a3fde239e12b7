"""What this machine knows of a cluster's jobs: the ledger (artifacts/<cluster>/<job>/job.json: the job's last run
and whether its result came home) and the verified copies the collector keeps (``current`` and older ones).

The rule `make destroy` applies (``blocking_jobs``): a job blocks the destroy of its cluster while its last run may
hold a result that is only on the hosts, i.e. while its state is

* ``started``: `make train` writes it, with a fresh run id, BEFORE the playbook starts. A train that ends without a
  decision (interrupted by Ctrl-C, its terminal killed, a failure in or after the gang start) leaves it: the job
  may still run or have finished on the hosts;
* ``finished``: the wait decided ``done`` but this run's collect did not bring the result home.

Nothing else blocks: ``collected`` (the collect of THIS run, by `make train` or a later `make collect`, installed a
verified copy: ``collected_version`` is its manifest sha256, the name of the copy ``current`` then pointed at, and
that copy is still here), ``ended`` (the wait decided failed, stalled, preempted, timeout or stopped: nothing
finished to lose; ``decision`` says which; ``not started``: the playbook ended before its gang-start play, e.g. a
host failed its check), ``stopped`` (`make stop` succeeded on a ``started`` run; a ``finished``
run stays finished: stopping does not bring its result home). A copy left by an older run never counts: a new run
drops ``collected_version``, and only a collect seen in a run's own events sets it again. `make destroy FORCE=1`
overrides. A record written before the states existed (``finished``/``collected`` booleans) keeps its old meaning.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tfcluster.collect.store import CURRENT
from tfcluster.core import contract, paths
from tfcluster.core.files import atomic_write_json
from tfcluster.run.wait import RUNNING, UNREACHABLE

LEDGER = "job.json"
STARTED, FINISHED, COLLECTED, ENDED, STOPPED = "started", "finished", "collected", "ended", "stopped"
BLOCKING = (STARTED, FINISHED)
NOT_STARTED = "not started"  # the ``decision`` of a train whose playbook ended before its gang start
_VERSION = re.compile(r"[0-9a-f]{64}")
# What each blocking state means to a user, and what unblocks it.
_WHY = {STARTED: "started, outcome unknown: it may still run or have finished", FINISHED: "finished, not collected"}


def read_ledger(directory: Path) -> dict[str, Any]:
    try:
        data = json.loads((directory / LEDGER).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


@contextmanager
def _update(directory: Path) -> Iterator[dict[str, Any]]:
    """Read, change and write the ledger under a lock on the job dir (`make stop` may write while a train runs);
    nothing is written when the record did not change."""
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        record = read_ledger(directory)
        before = json.dumps(record, sort_keys=True)
        yield record
        if json.dumps(record, sort_keys=True) != before:
            record["updated_at"] = round(time.time(), 3)
            atomic_write_json(directory / LEDGER, record)
    finally:
        os.close(fd)


def collected_dir(directory: Path) -> Path | None:
    """The verified copy of a job on this machine (``current``, or the job dir itself for older copies)."""
    for candidate in (directory / CURRENT, directory):
        if (candidate / contract.DONE).is_file():
            return candidate
    return None


def collected_version(directory: Path, events: Sequence[Mapping[str, Any]]) -> str | None:
    """The version a run's own collect installed: a ``collected`` event of that run names this job's ``current``
    (its ``dest`` is data: checked against the job dir), and ``current`` points at a verified copy's digest."""
    wanted = os.path.realpath(directory)
    seen = any(e.get("event") == "collected" and isinstance(e.get("dest"), str) and Path(e["dest"]).name == CURRENT
               and os.path.realpath(Path(e["dest"]).parent) == wanted for e in events)
    try:
        version = os.readlink(directory / CURRENT) if seen else ""
    except OSError:
        return None
    return version if _VERSION.fullmatch(version) and (directory / version / contract.DONE).is_file() else None


def last_decision(events: Sequence[Mapping[str, Any]]) -> str | None:
    """The wait's decision of a run (its last ``decision`` event), or None when it made none."""
    decisions = [e.get("decision") for e in events if e.get("event") == "decision"]
    return str(decisions[-1]) if decisions and decisions[-1] is not None else None


def start_run(directory: Path, cluster_name: str) -> str:
    """Record a train's start (before anything runs): state ``started``, a fresh run id, no collected version."""
    run = uuid.uuid4().hex[:16]
    with _update(directory) as record:
        record.clear()
        record.update(cluster_name=cluster_name, run=run, state=STARTED, started_at=round(time.time(), 3))
    return run


def end_run(directory: Path, run: str, decision: str | None, version: str | None, *, began: bool = True) -> None:
    """Record how run ``run`` ended: collected (``version``), finished (done), ended (failed, stalled, ...; or not
    ``began``: the playbook ended before its gang start), or else still ``started``: no decision (an interrupt),
    or ``unreachable`` (no host answered beyond the grace and nothing was stopped: the job may still run there)."""
    with _update(directory) as record:
        if record.get("run") != run:
            return
        if version:
            record.update(state=COLLECTED, collected_version=version)
        elif decision == "done":
            record["state"] = FINISHED
        elif decision not in (None, RUNNING, UNREACHABLE):
            record.update(state=ENDED, decision=decision)
        elif not began:
            record.update(state=ENDED, decision=NOT_STARTED)


def record_recovery(directory: Path, run: str, entry: Mapping[str, Any]) -> None:
    """A lost host replaced during run ``run`` (`make train` with RECOVER): ``recoveries`` gets ``entry`` (slot,
    why, seconds, steps_lost, at)."""
    with _update(directory) as record:
        if record.get("run") == run:
            record["recoveries"] = [*record.get("recoveries", []), dict(entry)]


def record_collect(directory: Path, cluster_name: str, version: str | None) -> None:
    """`make collect`: the run's result is home when this collect installed a copy; else nothing changes."""
    if not version:
        return
    with _update(directory) as record:
        record.setdefault("cluster_name", cluster_name)
        record.update(state=COLLECTED, collected_version=version)
        for key in ("finished", "collected"):  # an old record's booleans no longer apply
            record.pop(key, None)


def record_stop(directory: Path) -> None:
    """`make stop` succeeded: a started run is over (a finished one keeps its uncollected result)."""
    if not (directory / LEDGER).is_file():
        return
    with _update(directory) as record:
        if record.get("state") == STARTED:
            record["state"] = STOPPED


def blocking_state(directory: Path, record: Mapping[str, Any]) -> str | None:
    """Why this job blocks `make destroy` (its state, see the module docstring), or None."""
    state = record.get("state")
    if state is None:  # written before the states existed
        return FINISHED if record.get("finished") and not record.get("collected") else None
    if state in BLOCKING:
        return str(state)
    version = record.get("collected_version")
    if state == COLLECTED and not (isinstance(version, str) and _VERSION.fullmatch(version)
                                   and (directory / version / contract.DONE).is_file()):
        return FINISHED  # the copy of that run is gone from this machine
    return None


def blocking_jobs(cluster: str, cluster_name: str) -> dict[str, str]:
    """Jobs of this cluster whose result may be only on its hosts: job -> what that means (see the docstring)."""
    root = paths.ARTIFACTS / cluster
    pattern = contract.NAME_RULES["job"].pattern  # the pattern only: a job trained before an id was reserved counts
    jobs = sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink() and re.fullmatch(pattern, p.name)) \
        if root.is_dir() else []
    found: dict[str, str] = {}
    for directory in jobs:
        record = read_ledger(directory)
        state = blocking_state(directory, record) if record.get("cluster_name", cluster_name) == cluster_name \
            else None
        if state:
            found[directory.name] = _WHY[state]
    return found


def uncollected_jobs(cluster: str, cluster_name: str) -> list[str]:
    """The names of ``blocking_jobs``."""
    return list(blocking_jobs(cluster, cluster_name))


def dir_size(path: Path) -> int:
    """Bytes of the regular files under ``path``."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def old_copies(job_dir: Path) -> list[Path]:
    """Verified copies of a job other than the one ``current`` points at (the collector keeps them)."""
    current = (job_dir / CURRENT).resolve() if (job_dir / CURRENT).is_symlink() else None
    return sorted(p for p in job_dir.iterdir() if p.is_dir() and not p.is_symlink() and p.resolve() != current
                  and (p / contract.MANIFEST).is_file()) if job_dir.is_dir() else []
