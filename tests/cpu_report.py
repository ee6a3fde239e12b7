"""``pytest --cpu-report N``: where the suite's CPU goes (issue 20 sizes the suite by it: 2 cores, CPU-bound).

Each test's CPU, setup and teardown included, is measured where it is spent:

- **here**: the test process and everything it starts on this machine (Ansible and its forks, Terraform, trainers,
  moto, ssh). The process moves into its own cgroup (``tfcluster-test/<run>/<worker>`` in the unified hierarchy),
  so its children's CPU counts while they run, not when they are reaped. Without a writable unified cgroup (not
  root) the resource usage of the process and its reaped children stands in, and the table says so.
- **on the lab hosts**: a lab is a cgroup tree (``tfcluster-lab/<lab>``, lab/system.py); its ``usage_usec`` is read
  every second, and a lab's CPU during a test goes to that test when the test's process started the lab (its
  supervisor descends from it). A lab that goes down loses at most its last second.

The summary prints the N tests that used the most CPU, every lab's total (read here, whoever started it), and the
machine's busy CPU over the session (/proc/stat), so the tests' sum can be checked against the whole.
"""

from __future__ import annotations

import os
import resource
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from lab import system
from tests.xdist_groups import group_of

TEST_TOP = "tfcluster-test"
SAMPLE_S = 1.0
PROPERTY = "cpu"


def usage_s(group: Path) -> float | None:
    """A cgroup's CPU (user + system) in seconds from its cpu.stat, None when it is gone."""
    with suppress(OSError, ValueError):
        for line in (group / "cpu.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec":
                return int(value) / 1e6
    return None


def unified_base() -> Path | None:
    """The cgroup v2 hierarchy (pure v2, or the ``unified`` one of a hybrid), where cpu.stat is kept."""
    with suppress(Exception):  # no cgroup hierarchy at all: lab.system raises LabError
        return next((b for b in system.cgroup_bases() if (b / "cpu.stat").exists()), None)
    return None


def parent_pid(pid: int) -> int:
    with suppress(OSError, ValueError, StopIteration):
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
        return int(next(line for line in status if line.startswith("PPid:")).split()[1])
    return 0


def descends_from(pid: int, ancestor: int) -> bool:
    for _ in range(64):
        if pid <= 1:
            return False
        if pid == ancestor:
            return True
        pid = parent_pid(pid)
    return False


def lab_pids(lab: Path) -> list[int]:
    """The processes of a lab's hosts' top cgroups (each host's supervisor); none once the lab is gone (a lab going
    down while it is read: seen with six workers)."""
    try:
        hosts = [d for d in lab.iterdir() if d.is_dir()]
    except OSError:
        return []
    pids: list[int] = []
    for host in hosts:
        with suppress(OSError, ValueError):
            pids += [int(p) for p in (host / "cgroup.procs").read_text().split()]
    return pids


def busy_cpu_s() -> float:
    """The machine's busy CPU seconds since boot (every field of /proc/stat's cpu line but idle and iowait)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def rusage_s() -> float:
    return sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                  resource.getrusage(resource.RUSAGE_CHILDREN)))


@dataclass
class LabSampler:
    """Every lab's usage each second; ``mine``: the labs this process started. A lab that comes back under the same
    name (usage smaller than before) keeps counting from its previous total."""

    base: Path
    me: int = field(default_factory=os.getpid)
    totals: dict[str, float] = field(default_factory=dict)
    mine: set[str] = field(default_factory=set)
    _seen: dict[str, float] = field(default_factory=dict)
    _carried: dict[str, float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)

    def sample(self) -> dict[str, float]:
        top = self.base / system.CGROUP_TOP
        labs = [d for d in top.iterdir() if d.is_dir()] if top.is_dir() else []
        with self._lock:
            for lab in labs:
                now = usage_s(lab)
                if now is None:
                    continue
                if now < self._seen.get(lab.name, 0.0):
                    self._carried[lab.name] = self.totals.get(lab.name, 0.0)
                self._seen[lab.name] = now
                self.totals[lab.name] = self._carried.get(lab.name, 0.0) + now
                if lab.name not in self.mine and any(descends_from(p, self.me) for p in lab_pids(lab)):
                    self.mine.add(lab.name)
            return dict(self.totals)

    def run(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            with suppress(OSError):
                self.sample()

    def start(self) -> None:
        threading.Thread(target=self.run, name="cpu-report", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()


@dataclass
class Meter:
    """This process's own CPU (its cgroup, or rusage) and its labs', at a test's start and end."""

    sampler: LabSampler | None
    group: Path | None
    origin: Path | None = None

    def here_s(self) -> float:
        return (usage_s(self.group) if self.group else None) or rusage_s()

    def snapshot(self) -> tuple[float, dict[str, float]]:
        labs = self.sampler.sample() if self.sampler else {}
        return self.here_s(), labs

    def delta(self, start: tuple[float, dict[str, float]]) -> dict[str, Any]:
        here, labs = self.snapshot()
        mine = self.sampler.mine if self.sampler else set()
        used = {name: round(labs[name] - start[1].get(name, 0.0), 1) for name in labs if name in mine}
        return {"here": round(here - start[0], 1), "labs": {k: v for k, v in used.items() if v >= 0.1},
                "cgroup": self.group is not None}


def enter_cgroup(base: Path, name: str) -> tuple[Path, Path] | None:
    """Move this process into ``base/tfcluster-test/name``; (that cgroup, the one it came from), None if it cannot."""
    with suppress(OSError, StopIteration):
        line = next(x for x in Path("/proc/self/cgroup").read_text().splitlines() if x.startswith("0::"))
        origin = base / line[3:].lstrip("/")
        group = base / TEST_TOP / name
        group.mkdir(parents=True, exist_ok=True)
        (group / "cgroup.procs").write_text(str(os.getpid()))
        return group, origin
    return None


def remove_groups(run: Path) -> None:
    """A run's cgroups (``tfcluster-test/<run>/<worker>``), the run's and the top one, where nothing is left in them."""
    for group in [*(run.iterdir() if run.is_dir() else ()), run, run.parent]:
        with suppress(OSError):
            group.rmdir()


def prune_runs(top: Path, live: Callable[[set[int]], set[int]] = system.live) -> None:
    """The cgroups of earlier runs whose process is gone (``top/<pid>``) and that never reached their own cleanup
    (killed): removed once empty."""
    for run in top.iterdir() if top.is_dir() else ():
        if run.is_dir() and run.name.isdigit() and not live({int(run.name)}):
            remove_groups(run)


def leave_cgroup(meter: Meter) -> None:
    """Back to the cgroup this process came from, with every child still in its group (an SSH ControlPersist
    master outlives the test that started it), so the group can be removed."""
    if meter.group and meter.origin:
        for pid in {os.getpid(), *system.cgroup_pids(meter.group)}:
            with suppress(OSError):
                (meter.origin / "cgroup.procs").write_text(str(pid))
        remove_groups(meter.group.parent)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--cpu-report", type=int, default=0, metavar="N",
                     help="print the N tests that used the most CPU (here and on the lab hosts) and each lab's total")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("cpu_report", 0):
        config.pluginmanager.register(CpuReport(config), "tfcluster-cpu-report")


Record = tuple[str, dict[str, Any]]


class CpuReport:
    """The hooks of --cpu-report: a process that runs tests measures each one (a pytest-xdist worker sends its
    figures in the teardown report's user_properties); the process that prints the summary collects them."""

    def __init__(self, config: pytest.Config) -> None:
        self.top = int(config.getoption("cpu_report"))
        base = unified_base()
        worker = getattr(config, "workerinput", None)
        self.summarizes = worker is None
        self.worker = str((worker or {}).get("workerid", "main"))
        if self.summarizes and base:
            prune_runs(base / TEST_TOP)
        self.meter: Meter | None = None
        self.starts: dict[str, tuple[float, float, dict[str, float]]] = {}
        self.records: list[Record] = []
        if worker is not None or not config.getoption("numprocesses", None):  # this process runs tests
            run = os.getppid() if worker is not None else os.getpid()  # a worker's parent is the controller
            entered = enter_cgroup(base, f"{run}/{(worker or {}).get('workerid', 'main')}") if base else None
            self.meter = Meter(LabSampler(base) if base else None, *(entered or (None, None)))
        self.whole = self.meter.sampler if self.meter else (LabSampler(base) if base else None)
        if self.whole:
            self.whole.start()
        self.began = (time.time(), busy_cpu_s())

    def pytest_unconfigure(self) -> None:
        if self.whole:
            self.whole.stop()
        if self.meter:
            leave_cgroup(self.meter)
        if self.summarizes and (base := unified_base()):  # after every worker: their cgroups, once empty
            remove_groups(base / TEST_TOP / str(os.getpid()))

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        if self.meter:
            self.starts[item.nodeid] = (time.time(), *self.meter.snapshot())

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        report = yield
        start = self.starts.pop(item.nodeid, None) if report.when == "teardown" else None
        if self.meter and start:
            report.user_properties.append(
                (PROPERTY, {**self.meter.delta(start[1:]), "wall": round(time.time() - start[0], 1), "at": start[0],
                            "worker": self.worker, "group": group_of(item)}))
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.summarizes and report.when == "teardown":
            self.records += [(report.nodeid, value) for key, value in report.user_properties if key == PROPERTY]

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.summarizes:
            return
        labs = self.whole.sample() if self.whole else {}
        terminalreporter.write_sep("=", "CPU per test (--cpu-report)")
        for line in summary_lines(self.records, labs, busy_cpu_s() - self.began[1],
                                  time.time() - self.began[0], self.top):
            terminalreporter.write_line(line)
        terminalreporter.write_sep("=", "groups on the clock (--cpu-report)")
        for line in group_lines(self.records, self.began[0]):
            terminalreporter.write_line(line)


def summary_lines(records: list[Record], labs: dict[str, float], busy: float, wall: float, top: int) -> list[str]:
    """The report's text: the ``top`` tests by CPU, each lab's total, and how much of the machine's CPU that is."""
    rows = sorted(((r["here"] + sum(r["labs"].values()), r, nodeid) for nodeid, r in records),
                  key=lambda row: -row[0])
    here = sum(r["here"] for _n, r in records)
    on_labs = sum(labs.values())
    lines = [f"{'CPU-s':>8} {'here':>8} {'labs':>8} {'wall-s':>8}  test (setup + call + teardown)"]
    lines += [f"{total:8.1f} {r['here']:8.1f} {total - r['here']:8.1f} {r['wall']:8.1f}  {nodeid}"
              + ("" if r["cgroup"] else "  (rusage: children counted when reaped)") for total, r, nodeid in rows[:top]]
    lines += ["", f"{'CPU-s':>8}  lab (every host of it, whoever started it)"]
    lines += [f"{cpu:8.1f}  {name}" for name, cpu in sorted(labs.items(), key=lambda kv: -kv[1])]
    lines += ["", f"{len(records)} tests: {here:.0f} CPU-s here + {on_labs:.0f} CPU-s on lab hosts = "
              f"{here + on_labs:.0f} CPU-s; the machine was busy {busy:.0f} CPU-s in {wall:.0f} s of wall "
              f"({os.cpu_count()} cores)"]
    return lines


def group_lines(records: list[Record], began: float) -> list[str]:
    """When each xdist group (and each worker's ungrouped tests) ran: its worker, first start and last end in
    seconds from the session's start, its tests and their summed wall. The longest chain bounds the run."""
    spans: dict[tuple[str, str], list[float]] = {}
    for _nodeid, r in records:
        if "at" not in r:
            continue
        key = (str(r.get("group") or "(ungrouped)"), str(r.get("worker", "?")))
        span = spans.setdefault(key, [r["at"], r["at"] + r["wall"], 0, 0.0])
        span[0], span[1] = min(span[0], r["at"]), max(span[1], r["at"] + r["wall"])
        span[2] += 1
        span[3] += r["wall"]
    lines = [f"{'start':>7} {'end':>7} {'tests':>5} {'wall-s':>8}  worker group"]
    lines += [f"{first - began:7.0f} {last - began:7.0f} {count:5.0f} {wall:8.0f}  {worker} {group}"
              for (group, worker), (first, last, count, wall) in sorted(spans.items(), key=lambda kv: kv[1][0])]
    return lines
