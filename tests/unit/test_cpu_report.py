"""tests/cpu_report.py (``pytest --cpu-report N``): the lab sampler over a cgroup tree, ownership, the summary."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lab import system
from tests import cpu_report


def write_usage(group: Path, seconds: float) -> None:
    group.mkdir(parents=True, exist_ok=True)
    (group / "cpu.stat").write_text(f"usage_usec {int(seconds * 1e6)}\nuser_usec 1\nsystem_usec 1\n")


def test_usage_reads_cpu_stat_and_a_gone_group_is_none(tmp_path: Path) -> None:
    write_usage(tmp_path / "g", 12.5)
    assert cpu_report.usage_s(tmp_path / "g") == 12.5
    assert cpu_report.usage_s(tmp_path / "gone") is None


def test_a_lab_that_comes_back_under_its_name_keeps_counting(tmp_path: Path) -> None:
    lab = tmp_path / system.CGROUP_TOP / "flow"
    sampler = cpu_report.LabSampler(tmp_path)
    write_usage(lab, 30.0)
    assert sampler.sample() == {"flow": 30.0}
    write_usage(lab, 5.0)  # down and up again: a new cgroup counts from zero
    assert sampler.sample() == {"flow": 35.0}
    write_usage(lab, 7.0)
    assert sampler.sample() == {"flow": 37.0}


def test_a_lab_is_mine_when_its_supervisor_descends_from_this_process(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        for name, pid in (("mine", child.pid), ("other", 1)):
            write_usage(tmp_path / system.CGROUP_TOP / name, 1.0)
            write_usage(tmp_path / system.CGROUP_TOP / name / "host-0", 1.0)
            (tmp_path / system.CGROUP_TOP / name / "host-0" / "cgroup.procs").write_text(f"{pid}\n")
        sampler = cpu_report.LabSampler(tmp_path)
        sampler.sample()
        assert sampler.mine == {"mine"}
        assert cpu_report.descends_from(child.pid, os.getpid())
        assert not cpu_report.descends_from(os.getpid(), child.pid)
    finally:
        child.kill()
        child.wait()


def test_a_test_gets_the_cpu_of_its_own_labs_only(tmp_path: Path) -> None:
    sampler = cpu_report.LabSampler(tmp_path)
    write_usage(tmp_path / system.CGROUP_TOP / "mine", 10.0)
    write_usage(tmp_path / system.CGROUP_TOP / "other", 10.0)
    sampler.mine.add("mine")
    meter = cpu_report.Meter(sampler, None)
    start = meter.snapshot()
    write_usage(tmp_path / system.CGROUP_TOP / "mine", 14.0)
    write_usage(tmp_path / system.CGROUP_TOP / "other", 50.0)
    delta = meter.delta(start)
    assert delta["labs"] == {"mine": 4.0}
    assert delta["here"] >= 0 and delta["cgroup"] is False


def test_the_summary_ranks_tests_by_their_whole_cpu_and_sums_every_lab() -> None:
    records = [("t::small", {"here": 5.0, "labs": {}, "cgroup": True, "wall": 9.0}),
               ("t::lab", {"here": 1.0, "labs": {"flow": 20.0}, "cgroup": True, "wall": 30.0}),
               ("t::reaped", {"here": 7.0, "labs": {}, "cgroup": False, "wall": 2.0})]
    lines = cpu_report.summary_lines(records, {"flow": 25.0, "twin": 3.0}, busy=50.0, wall=40.0, top=2)
    table = [line for line in lines if "t::" in line]
    assert len(table) == 2 and "t::lab" in table[0] and "t::reaped" in table[1]
    assert table[0].split()[:4] == ["21.0", "1.0", "20.0", "30.0"]
    assert "(rusage" in table[1]
    assert lines.index("    25.0  flow") < lines.index("     3.0  twin")
    assert lines[-1].startswith("3 tests: 13 CPU-s here + 28 CPU-s on lab hosts = 41 CPU-s; the machine was busy 50")


def test_the_clock_shows_each_group_on_its_worker_from_its_first_start_to_its_last_end() -> None:
    def record(nodeid: str, worker: str, at: float, wall: float) -> tuple[str, dict[str, object]]:
        group = nodeid.rpartition("@")[2] if nodeid.endswith("@flow") else None
        return nodeid, {"here": 1.0, "labs": {}, "cgroup": True, "wall": wall, "at": at, "worker": worker,
                        "group": group}
    records = [record("a::one@flow", "gw1", 1010.0, 20.0), record("a::two@flow", "gw1", 1030.0, 50.0),
               record("b::solo", "gw0", 1005.0, 3.0), record("b::id[user@host]", "gw0", 1100.0, 4.0)]
    lines = cpu_report.group_lines(records, began=1000.0)
    assert [line.split() for line in lines[1:]] == [["5", "104", "2", "7", "gw0", "(ungrouped)"],
                                                         ["10", "80", "2", "70", "gw1", "flow"]]
    assert lines[0].split()[-2:] == ["worker", "group"]


def test_the_option_prints_the_table_in_a_real_run(tmp_path: Path) -> None:
    spend = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.5:\n    pass\n"
    (tmp_path / "test_x.py").write_text(f"import subprocess, sys\n\ndef test_spends():\n"
                                        f"    subprocess.run([sys.executable, '-c', {spend!r}], check=True)\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.cpu_report", "-p", "no:cacheprovider",
                           "--cpu-report", "3", "-q", str(tmp_path / "test_x.py")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "CPU per test (--cpu-report)" in proc.stdout
    row = next(line for line in proc.stdout.splitlines() if "test_x.py::test_spends" in line)
    assert float(row.split()[1]) >= 0.5, row  # the child's 0.5 s of CPU, counted here
    assert "1 tests:" in proc.stdout
    assert "groups on the clock (--cpu-report)" in proc.stdout
    assert any(line.split()[-2:] == ["main", "(ungrouped)"] for line in proc.stdout.splitlines()), proc.stdout


@pytest.mark.parametrize("option", ["", "--cpu-report 0"])
def test_without_the_option_nothing_is_measured(tmp_path: Path, option: str) -> None:
    (tmp_path / "test_y.py").write_text("def test_y():\n    pass\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.cpu_report", "-p", "no:cacheprovider",
                           *option.split(), "-q", str(tmp_path / "test_y.py")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "CPU per test" not in proc.stdout


def test_an_earlier_runs_emptied_cgroups_are_removed_and_a_live_runs_kept(tmp_path: Path) -> None:
    top = tmp_path / "tfcluster-test"
    for path in ("111/gw0", "111/gw1", "222/gw0", "333/main"):
        (top / path).mkdir(parents=True)
    (top / "333" / "main" / "left").mkdir()  # still holds a group: not empty, so kept
    cpu_report.prune_runs(top, live=lambda pids: pids & {222})
    assert sorted(p.name for p in top.iterdir()) == ["222", "333"]
    assert (top / "222" / "gw0").is_dir() and (top / "333" / "main").is_dir()
