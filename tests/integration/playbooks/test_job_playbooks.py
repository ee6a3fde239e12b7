"""The job's inputs, its deadline, its failure summary and SCRIPT jobs, through train.yml on local slots.

Inputs are data: arguments reach the program as they were typed, whatever they hold (quotes, ';', '%', '$',
'{{ }}'), and nothing they hold runs. A job id that could escape a path or a shell is refused before anything is
rendered. A deadline ends the job as timeout after the program's backup. A failure shows the exception and the line
of the user's script, not the tail of a tensor dump. A script that saves nothing succeeds.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.playbooks.local_cluster import Cluster, assert_ok, byo_vars, recap
from tfcluster.core import contract
from tfcluster.host import jobspec

pytestmark = pytest.mark.integration


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    yield c
    c.stop_everything()


@pytest.mark.xdist_group("byoslots")  # the prepared slots (conftest.py)
def test_arguments_are_data_never_code(slots: Cluster) -> None:
    marker = slots.tmp / "MARKER"
    echo = slots.tmp / "echo-{}.json"
    odd = ["x'; touch " + str(marker) + "; '", "{{ lookup('pipe', 'touch " + str(marker) + "') }}", "50%", "%n",
           "$HOME", "${PATH}", "a b", '"quoted"', "back\\slash", "`touch " + str(marker) + "`"]
    args = ["--steps", "1", "--echo-args", str(echo).format("w"), *odd]
    proc = slots.playbook("train.yml", "inert", extra_vars=byo_vars(args))
    assert_ok(proc)
    assert not marker.exists(), "an argument ran as code"
    seen = json.loads(Path(str(echo).format("w")).read_text())
    assert seen["argv"] == args and seen["rest"] == odd
    assert seen["env"][contract.ENV_JOB] == "inert" and seen["env"]["TF_USE_LEGACY_KERAS"] == "1"


@pytest.mark.xdist_group("byoslots")  # the prepared slots (conftest.py)
def test_a_string_of_arguments_still_works(slots: Cluster) -> None:
    """Old callers pass one string: it is split like a shell would split it, and still never run."""
    echo = slots.tmp / "echo.json"
    proc = slots.playbook("train.yml", "legacy-args", extra_vars={
        **byo_vars([]), "tfcluster_script_args": f"--steps 1 --echo-args {echo} 'a b' \"c;d\""})
    assert_ok(proc)
    assert json.loads(echo.read_text())["rest"] == ["a b", "c;d"]


@pytest.mark.parametrize("job", ["x;id", "../escape", "a b", "{{ 7 * 7 }}", "j$HOME"])
def test_an_unsafe_job_id_is_refused_before_anything_is_rendered(cluster: Cluster, job: str) -> None:
    proc = cluster.playbook("train.yml", job, extra_vars=byo_vars("--steps 1"))
    assert proc.returncode != 0
    assert "is not a safe name" in proc.stdout and "Fix: use letters, digits" in proc.stdout, proc.stdout[-3000:]
    # Refused in site.yml's first play, on the control machine: no host was probed or prepared.
    assert "Reach every host" not in proc.stdout and not list(cluster.local_root.glob("*/*/*")), proc.stdout[-3000:]
    assert "49" not in proc.stdout.split("is not a safe name")[0][-200:]  # never templated


@pytest.mark.xdist_group("byoslots")  # the prepared slots (conftest.py)
def test_the_deadline_ends_the_job_as_timeout_after_a_backup(slots: Cluster) -> None:
    extra = byo_vars("--forever --step-seconds 0.2 --backup-on-sigterm", tfcluster_max_duration=4)
    proc = slots.playbook("train.yml", "deadline", extra_vars=extra, timeout=300)
    assert proc.returncode != 0
    assert "Job deadline timeout on worker-0" in proc.stdout or "Job deadline timeout on worker-1" in proc.stdout
    assert "reached its deadline (MAX_DURATION 4 s" in proc.stdout, proc.stdout[-4000:]
    for host in ("worker-0", "worker-1"):
        state = json.loads((slots.host_dir(host) / "run/tfcluster/deadline/state.json").read_text())
        assert state["state"] == jobspec.TIMEOUT and state["exit_code"] == contract.EXIT_PREEMPTED, (host, state)
        log = (slots.host_dir(host) / "var/log/tfcluster/deadline.log").read_text()
        assert "saving a backup" in log and log.count("byo_job worker") == 1  # not restarted


@pytest.mark.xdist_group("byoslots")  # the prepared slots (conftest.py)
def test_a_failure_shows_the_exception_not_the_dump(slots: Cluster) -> None:
    proc = slots.playbook("train.yml", "boom", extra_vars=byo_vars("--steps 1 --raise", tf_job_max_restarts=0))
    assert proc.returncode != 0
    out = proc.stdout
    assert "Job boom failed on worker-" in out and "(exit code 1, restarts 0)" in out
    # The frame is the deployed copy of the script (current/user/), where it ran.
    assert re.search(r"Error: ValueError: Unrecognized type PerReplica: PerReplica:\{ \(at \S+/opt/tfcluster/"
                     r"trainer/current/user/byo_job\.py:1 in main: model\.fit\(dataset\)\)", out), out[-4000:]
    assert "Last lines of worker-" in out


@pytest.mark.xdist_group("byoslots")  # the prepared slots (conftest.py)
def test_a_script_that_saves_nothing_succeeds(slots: Cluster) -> None:
    proc = slots.playbook("train.yml", "nothing", extra_vars=byo_vars("--steps 2 --write-nothing"))
    assert_ok(proc)
    chief = slots.host_dir("worker-0") / "var/lib/tfcluster/nothing"
    assert (chief / contract.MANIFEST).read_text() == "" and (chief / contract.DONE).is_file()
    again = slots.playbook("train.yml", "nothing", extra_vars=byo_vars("--steps 2 --write-nothing"))
    assert_ok(again)
    assert "already finished" in again.stdout
    assert all(c["changed"] == 0 for c in recap(again.stdout).values()), again.stdout[-3000:]
