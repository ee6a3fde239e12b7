"""Ctrl-C or a closed terminal stops the `tfcluster` command, never the job (issue 21 item 3).

A terminal signals its whole foreground process group: the command, ansible-playbook and their children. The
command (tfcluster.run.ansible.run) passes SIGINT on to ansible-playbook and leaves; a task started by the process
backend (tfcluster.host.supervisor, what local slots and hosts without systemd run) lives in a session of its own,
and a systemd unit is no child of the command at all - so neither signal reaches the job. Here a stand-in
ansible-playbook starts a real task through the supervisor, then the test signals the command's process group as a
terminal would."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tfcluster.host import jobspec, jobstatus, supervisor
from tfcluster.run import ansible

REPO = Path(__file__).resolve().parents[3]
# The stand-in playbook: start the task (as the job module does), say so, then wait like the wait loop.
PLAYBOOK = """
import sys, time
from tfcluster.host import supervisor
supervisor.start(sys.argv[1])
open(sys.argv[2], "w").write("started")
time.sleep(600)
"""
# SIGHUP and SIGINT as a terminal's foreground job has them, first in every stand-in: the suite may run under nohup
# (SIGHUP ignored) or as a background job of a shell without job control (`make test &` in a script: SIGINT
# ignored), and a child inherits an ignored signal, so Python would never raise KeyboardInterrupt (seen: the command
# waited out the 90 s).
TERMINAL = """
import signal
signal.signal(signal.SIGHUP, signal.SIG_DFL)
signal.signal(signal.SIGINT, signal.default_int_handler)
"""
# The command's side: tfcluster.run.ansible.run, as cmd_train calls it; Ctrl-C reaches it as KeyboardInterrupt.
COMMAND = TERMINAL + """
import sys
from pathlib import Path
from tfcluster.run import ansible
try:
    ansible.run([sys.executable, "-c", sys.argv[1], sys.argv[2], sys.argv[3]], env=dict(__import__("os").environ),
                log=Path(sys.argv[4]), view=None, verbose=False)
except KeyboardInterrupt:
    sys.exit(130)
"""


def task_spec(tmp: Path) -> str:
    (tmp / "env").write_text(jobspec.render_env_file({"X": "1"}))
    spec = {"name": "long", "argv": ["/bin/sh", "-c", "echo training; sleep 120"], "env_file": str(tmp / "env"),
            "workdir": str(tmp), "run_dir": str(tmp / "run"), "log": str(tmp / "job.log"),
            "model_dir": str(tmp / "model"), "restart_sec": 0.1, "max_restarts": 0, "pythonpath": str(REPO)}
    path = tmp / "spec.json"
    path.write_text(json.dumps(spec))
    return str(path)


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGHUP, -signal.SIGHUP)])
def test_a_signal_to_the_command_leaves_the_job_running(tmp_path: Path, sig: signal.Signals, code: int) -> None:
    spec, started = task_spec(tmp_path), tmp_path / "started"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = subprocess.Popen([sys.executable, "-c", COMMAND, PLAYBOOK, spec, str(started), str(tmp_path / "run.log")],
                               env=env, cwd=REPO, start_new_session=True)  # its own group, like a terminal's job
    try:
        deadline = time.monotonic() + 30
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert started.exists(), "the stand-in playbook did not start the task"
        pid = jobspec.read_int(jobspec.main_pid_path(jobspec.load_spec(spec)))
        os.killpg(command.pid, sig)  # what Ctrl-C / a closed terminal does to the foreground group
        assert command.wait(90) == code  # a loaded machine: Python exits slowly
        time.sleep(0.5)
        status = jobstatus.status(spec)
        assert status["state"] == jobspec.RUNNING, status
        assert jobspec.pid_alive(pid), "the task died with the command"
    finally:
        if command.poll() is None:
            os.killpg(command.pid, signal.SIGKILL)
        supervisor.stop(spec)


def test_ctrl_c_is_passed_on_even_when_popens_lock_is_held() -> None:
    """A KeyboardInterrupt inside ``Popen.poll()`` can leave its ``_waitpid_lock`` held (CPython takes it before its
    ``try``); ``pass_interrupt`` still signals the child and reaps it instead of blocking forever in ``wait()``."""
    child = subprocess.Popen([sys.executable, "-c", TERMINAL + "import time\nprint('up', flush=True)\ntime.sleep(60)"],
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline() == "up\n"  # its SIGINT handler is in place
    assert child._waitpid_lock.acquire(False)  # as the interrupted poll leaves it
    try:
        done = threading.Thread(target=ansible.pass_interrupt, args=(child,), daemon=True)
        done.start()
        done.join(30)
        assert not done.is_alive(), "pass_interrupt blocked on Popen's lock"
        assert child.returncode not in (None, 0), child.returncode  # ended by the SIGINT (KeyboardInterrupt)
    finally:
        child._waitpid_lock.release()
        if child.returncode is None:
            child.kill()
            child.wait()
        if child.stdout is not None:
            child.stdout.close()
