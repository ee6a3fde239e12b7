"""Teardown leaves nothing behind: after a clean run, a failed boot, and a crashed supervisor; and the CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from lab import Lab, LabError, leftovers
from lab import system as labsys

# the lab tool's own labs (fixed names pt3, ...): one at a time
pytestmark = [pytest.mark.xdist_group("labtool"), pytest.mark.lab]


def _nothing_left(lab: Lab, host_names: list[str]) -> None:
    """The lab's own check, and the same facts checked again by hand."""
    assert leftovers(lab=lab.paths.lab) == []
    assert not Path("/sys/class/net", f"br-{lab.paths.lab}").exists()
    assert [n for n in host_names if Path("/sys/class/net", f"vb-{n}").exists()] == []
    mounts = Path("/proc/self/mountinfo").read_text()
    assert str(lab.paths.run) not in mounts
    assert not lab.paths.run.exists()
    for base in labsys.cgroup_bases():
        assert not (base / labsys.CGROUP_TOP / lab.paths.lab).exists()
    nspawn = subprocess.run(["pgrep", "-a", "-f", f"systemd-nspawn .*{lab.paths.run}"], capture_output=True,
                            text=True, check=False).stdout
    assert nspawn == ""


def test_down_leaves_nothing_and_can_run_again(start_lab: Callable[..., Lab]) -> None:
    names = ["d-a", "d-b"]
    lab = start_lab(slots=("chief", "worker"), name="ptdown", names=names)
    assert all(lab.reachable(n) for n in names)
    pids = labsys.cgroup_pids(labsys.lab_cgroups("ptdown")[0])
    assert pids, "the hosts' processes are in the lab's cgroup"
    lab.cut("d-b")  # a cut host tears down as well
    lab.down()
    _nothing_left(lab, names)
    assert labsys.live(pids) == set()
    lab.down()  # safe to re-run
    Lab(name="ptdown").down()  # and from a fresh object that has no state (another process)
    _nothing_left(lab, names)


def test_down_cleans_up_after_a_crashed_supervisor(start_lab: Callable[..., Lab]) -> None:
    lab = start_lab(slots=("chief",), name="ptcrash", names=["c-a"])
    supervisor = labsys.cgroup_pids(labsys.lab_cgroups("ptcrash", "c-a")[0], recursive=False)
    assert len(supervisor) == 1
    os.kill(supervisor.pop(), signal.SIGKILL)  # the tool dies; systemd-nspawn and the guest keep running
    assert lab.reachable("c-a")
    # A new run of the same lab (e.g. the next pytest session) cleans the leftovers and boots again.
    again = start_lab(slots=("chief",), name="ptcrash", names=["c-a"])
    assert again.ssh("c-a", "systemctl is-system-running").stdout.strip() == "running"
    Lab(name="ptcrash").down()
    _nothing_left(again, ["c-a"])


def test_failed_boot_raises_with_the_host_log_and_leaves_nothing() -> None:
    lab = Lab(slots=("chief",), name="ptfail", names=["f-a"], bind_ro=["/nonexistent/tfcluster-lab-test"],
              boot_timeout=30)
    with pytest.raises(LabError, match=r"f-a: systemd-nspawn exited") as err, lab:
        pass
    assert "nonexistent" in str(err.value)  # the host's log says why
    _nothing_left(lab, ["f-a"])


def test_host_name_in_use_by_another_lab_is_refused(start_lab: Callable[..., Lab],
                                                   request: pytest.FixtureRequest) -> None:
    start_lab(slots=("chief",), name="ptbusy1", names=["b-a"])
    other = Lab(slots=("chief",), name="ptbusy2", names=["b-a"])
    request.addfinalizer(other.down)
    with pytest.raises(LabError, match=r"host name 'b-a' is in use by another lab \(link vb-b-a exists\)"):
        other.start()


def test_cli_up_status_ssh_cut_restore_down() -> None:
    def lab(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([sys.executable, "-m", "lab", *args], capture_output=True, text=True,
                              timeout=300, check=False)
        if check:
            assert proc.returncode == 0, proc.stderr
        return proc

    try:
        up = lab("up", "--name", "ptcli", "--slots", "chief,ps", "--names", "k-chief,k-ps")
        assert "hosts.yml" in up.stdout
        status = json.loads(lab("status", "--name", "ptcli", "--json").stdout)
        assert [(h["name"], h["slot"], h["running"], h["ssh"]) for h in status["hosts"]] == [
            ("k-chief", "chief:0", True, True), ("k-ps", "ps:0", True, True)]
        assert lab("ssh", "--name", "ptcli", "k-ps", "hostname").stdout.strip() == "k-ps"
        lab("cut", "--name", "ptcli", "k-ps")
        status = json.loads(lab("status", "--name", "ptcli", "--json").stdout)
        assert [(h["link"], h["ssh"]) for h in status["hosts"]] == [("up", True), ("down", False)]
        lab("restore", "--name", "ptcli", "k-ps")
        env = lab("env", "--name", "ptcli").stdout
        assert "export TFCLUSTER_SOURCE=static" in env and "ptcli/hosts.yml" in env
        bad = lab("cut", "--name", "ptcli", "nope", check=False)
        assert bad.returncode == 1 and "no host 'nope'" in bad.stderr
    finally:
        lab("down", "--name", "ptcli")
    lab("down", "--name", "ptcli")
    assert "ptcli" not in lab("leftovers", check=False).stdout
    gone = lab("status", "--name", "ptcli", check=False)
    assert gone.returncode == 1 and "lab 'ptcli' is not up" in gone.stderr


def test_cli_rejects_bad_arguments() -> None:
    proc = subprocess.run([sys.executable, "-m", "lab", "up", "--name", "ptbad", "--slots", "chief,boss"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2
    assert "unknown task type(s) boss" in proc.stderr
