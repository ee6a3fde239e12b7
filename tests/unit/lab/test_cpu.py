"""A lab's CPU limit and weight (lab/system.py) on a fake cgroup tree: cgroup v1's cpu hierarchy and pure v2."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab import system
from lab.config import LabError


def v1(tmp_path: Path) -> Path:
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    return tmp_path


def v2(tmp_path: Path, controllers: str = "cpuset cpu io memory pids") -> Path:
    (tmp_path / "cgroup.controllers").write_text(controllers + "\n")
    (tmp_path / "cgroup.subtree_control").write_text("memory pids\n")
    host = tmp_path / system.CGROUP_TOP / "lab1" / "h1"  # lab/process.py makes the host's own group at boot
    host.mkdir(parents=True)
    for group in (host.parent.parent, host.parent):
        (group / "cgroup.subtree_control").write_text("\n")
    return tmp_path


def test_v1_a_host_joins_its_labs_group_and_the_top_weighs_as_several_processes(tmp_path: Path) -> None:
    base = v1(tmp_path)
    joined = system.cpu_join_groups("lab1", "h1", base)
    assert joined == [base / "cpu" / system.CGROUP_TOP / "lab1" / "h1"] and joined[0].is_dir()
    top = base / "cpu" / system.CGROUP_TOP
    assert int((top / "cpu.shares").read_text()) == system.CPU_TOP_PROCESSES * 1024
    assert system.cpu_group("lab1", base=base) == top / "lab1"


def test_v1_limit_the_lab_or_one_host_and_lift_it(tmp_path: Path) -> None:
    base = v1(tmp_path)
    system.cpu_join_groups("lab1", "h1", base)
    lab = base / "cpu" / system.CGROUP_TOP / "lab1"
    system.limit_cpu("lab1", 0.3, base=base)
    assert (lab / "cpu.cfs_quota_us").read_text() == "30000\n"
    assert (lab / "cpu.cfs_period_us").read_text() == f"{system.CPU_PERIOD_US}\n"
    system.limit_cpu("lab1", 0.15, "h1", base=base)
    assert (lab / "h1" / "cpu.cfs_quota_us").read_text() == "15000\n"
    system.limit_cpu("lab1", None, "h1", base=base)
    assert (lab / "h1" / "cpu.cfs_quota_us").read_text() == "-1\n"
    system.weigh_cpu("lab1", 400, base=base)
    assert (lab / "cpu.shares").read_text() == "4096\n"


def test_v2_the_controller_is_enabled_down_to_the_host_and_cpu_max_written(tmp_path: Path) -> None:
    base = v2(tmp_path)
    assert system.cpu_join_groups("lab1", "h1", base) == []  # the host's own group is the one on v2
    system.limit_cpu("lab1", 0.5, "h1", base=base)
    host = base / system.CGROUP_TOP / "lab1" / "h1"
    assert (host / "cpu.max").read_text() == f"50000 {system.CPU_PERIOD_US}\n"
    for parent in (base, base / system.CGROUP_TOP, base / system.CGROUP_TOP / "lab1"):
        assert "+cpu" in (parent / "cgroup.subtree_control").read_text(), parent
    assert (base / system.CGROUP_TOP / "cpu.weight").read_text() == f"{system.CPU_TOP_PROCESSES * 100}\n"
    system.limit_cpu("lab1", None, "h1", base=base)
    assert (host / "cpu.max").read_text() == f"max {system.CPU_PERIOD_US}\n"
    system.weigh_cpu("lab1", 300, base=base)
    assert (base / system.CGROUP_TOP / "lab1" / "cpu.weight").read_text() == "300\n"


@pytest.mark.parametrize(("setting", "message"), [
    (lambda base: system.limit_cpu("lab1", 0, base=base), "above 0 cores"),
    (lambda base: system.weigh_cpu("lab1", 0, base=base), "1-10000"),
    (lambda base: system.limit_cpu("other", 1.0, base=base), "lab other has no cpu group"),
])
def test_a_bad_setting_or_a_lab_that_is_not_up_is_refused(tmp_path: Path, setting: object, message: str) -> None:
    base = v1(tmp_path)
    system.cpu_join_groups("lab1", "h1", base)
    with pytest.raises(LabError, match=message):
        setting(base)  # type: ignore[operator]


def test_without_a_cpu_controller_the_error_says_so(tmp_path: Path) -> None:
    base = v2(tmp_path, controllers="memory pids")
    assert system.cpu_top(base) is None and system.cpu_join_groups("lab1", "h1", base) == []
    with pytest.raises(LabError, match="no cgroup cpu controller"):
        system.limit_cpu("lab1", 0.5, base=base)
