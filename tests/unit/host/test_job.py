"""The job's host runtime (tfcluster/host): env files, exit classes, the supervisor, unit states, the status and
log command line, the preflight checks."""

from __future__ import annotations

import io
import json
import os
import pwd
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tfcluster.core import contract, files
from tfcluster.host import jobspec, jobstatus, preflight, supervisor

REPO = Path(__file__).resolve().parents[3]
RUNNING, RESTARTING, STOPPED = jobspec.RUNNING, jobspec.RESTARTING, jobspec.STOPPED


def tf_config(index: int, n: int = 2) -> str:
    return contract.tf_config_json({"worker": [f"127.0.0.1:{2000 + i}" for i in range(n)]}, "worker", index)


# --- env files --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", [
    "plain", "", "with space", '{"cluster": {"worker": ["a:1"]}}', "it's", "a\"b'c", "$HOME", "back\\slash",
    "`tick` $x ${y}", "%n %i", "x'; touch MARKER; '", "{{ lookup('pipe', 'touch MARKER') }}",
])
def test_env_values_read_back_verbatim(value: str) -> None:
    text = jobspec.render_env_file({"A": value, "B": "next"}, "# header")
    assert text.startswith("# header\n")
    assert jobspec.parse_env_file(text) == {"A": value, "B": "next"}


@pytest.mark.parametrize(("env", "message"), [
    ({"1BAD": "x"}, "environment variable name '1BAD' is not valid"),
    ({"A B": "x"}, "is not valid"),
    ({"A": "two\nlines"}, "holds a line break"),
])
def test_env_file_refuses_what_systemd_cannot_read(env: dict, message: str) -> None:
    with pytest.raises(jobspec.JobError, match=message):
        jobspec.render_env_file(env)


@pytest.mark.parametrize("line", ["no equals sign", "BAD KEY=1", "=value"])
def test_parse_env_file_rejects_bad_lines(line: str) -> None:
    with pytest.raises(jobspec.JobError, match="is not KEY=VALUE"):
        jobspec.parse_env_file(line)


def test_env_file_parses_like_systemd() -> None:
    """Lines written by hand (or by an older role) in systemd's syntax."""
    text = "# c\n; c\nTF_CONFIG='{\"a\": \"b c\"}'\nX=\"q \\\"d\\\" \\$y \\n\"\n\nPLAIN=1\n"
    assert jobspec.parse_env_file(text) == {"TF_CONFIG": '{"a": "b c"}', "X": 'q "d" $y \\n', "PLAIN": "1"}


# --- exit codes -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("code", "outcome"), [(0, jobspec.SUCCEEDED), (contract.EXIT_PREEMPTED, jobspec.PREEMPTED),
                                               (1, supervisor.FAILURE), (2, supervisor.FAILURE),
                                               (-9, supervisor.FAILURE)])
def test_classify_exit(code: int, outcome: str) -> None:
    assert supervisor.classify_exit(code, jobspec.SPEC_DEFAULTS)[0] == outcome


def test_classify_exit_reports_signals_like_a_shell() -> None:
    assert supervisor.classify_exit(-9, jobspec.SPEC_DEFAULTS) == (supervisor.FAILURE, 137, 9)


# --- the supervisor -------------------------------------------------------------------------------------------
def write_spec(tmp: Path, argv: list[str], **more: object) -> Path:
    env = {"TF_CONFIG": tf_config(0), "GREETING": "hello", "ODD": "x'; touch MARKER; '"}
    (tmp / "job.env").write_text(jobspec.render_env_file(env))
    spec = {"name": "t", "argv": argv, "env_file": str(tmp / "job.env"), "workdir": str(tmp),
            "run_dir": str(tmp / "run"), "log": str(tmp / "log/t.log"), "model_dir": str(tmp / "model"),
            "restart_sec": 0.1, "pythonpath": str(REPO), **more}
    path = tmp / "job.json"
    path.write_text(json.dumps(spec))
    return path


def wait_state(spec: Path, states: tuple[str, ...], timeout: float = 15) -> dict:
    deadline = time.time() + timeout
    while time.time() < deadline:
        status = jobstatus.status(str(spec))
        if status["state"] in states:
            return status
        time.sleep(0.05)
    raise AssertionError(f"state never became {states}: {jobstatus.status(str(spec))}")


def test_supervisor_runs_with_the_env_file_only_and_start_is_idempotent(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEAK", "from-the-caller")
    spec = write_spec(tmp_path, ["/bin/sh", "-c", 'echo "$GREETING ${LEAK:-clean} $ODD $TF_CONFIG"; sleep 30'])
    assert supervisor.start(str(spec), check=True) == {"changed": True, "state": RUNNING, "msg": "would start"}
    assert not (tmp_path / "run").exists()
    first = supervisor.start(str(spec))
    try:
        assert first["changed"] is True
        assert supervisor.start(str(spec))["changed"] is False
        status = wait_state(spec, (RUNNING,))
        time.sleep(0.3)
        log = (tmp_path / "log/t.log").read_text()
        assert "hello clean x'; touch MARKER; ' " in log and '"index":0' in log
        assert not (tmp_path / "MARKER").exists()
        assert status["pid"] and Path(f"/proc/{status['pid']}").exists()
        assert supervisor.stop(str(spec), check=True)["changed"] is True
        assert wait_state(spec, (RUNNING,))
    finally:
        stopped = supervisor.stop(str(spec))
    assert stopped["changed"] is True
    assert wait_state(spec, (STOPPED,))["pid"] is None
    assert supervisor.stop(str(spec))["changed"] is False


def test_supervisor_restarts_on_failure_then_fails(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, ["/bin/sh", "-c", "echo run; exit 7"], max_restarts=2)
    supervisor.start(str(spec))
    status = wait_state(spec, (jobspec.FAILED,))
    assert status["exit_code"] == 7 and status["restarts"] == 2
    assert (tmp_path / "log/t.log").read_text().count("run") == 3


def test_exit_3_is_preemption_not_restarted(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, ["/bin/sh", "-c", f"echo run; exit {contract.EXIT_PREEMPTED}"], max_restarts=5)
    supervisor.start(str(spec))
    status = wait_state(spec, (jobspec.PREEMPTED,))
    assert status["restarts"] == 0 and status["exit_code"] == contract.EXIT_PREEMPTED


def test_bad_input_fails_at_once_without_restarts(tmp_path: Path) -> None:
    """Exit 2 (bad input, nothing started) would fail the same way again: failed, no restart (as the unit's
    RestartPreventExitStatus)."""
    spec = write_spec(tmp_path, ["/bin/sh", "-c", f"echo run; exit {contract.EXIT_BAD_INPUT}"], max_restarts=5)
    supervisor.start(str(spec))
    status = wait_state(spec, (jobspec.FAILED,))
    assert status["restarts"] == 0 and status["exit_code"] == contract.EXIT_BAD_INPUT
    assert (tmp_path / "log/t.log").read_text().count("run") == 1


def test_the_deadline_sends_sigterm_and_ends_as_timeout(tmp_path: Path) -> None:
    """max_duration: SIGTERM at the deadline; a program that saves a backup and exits 3 is not restarted."""
    script = (f"trap 'echo saving a backup; exit {contract.EXIT_PREEMPTED}' TERM; echo run; "
              "while true; do sleep 0.1; done")
    spec = write_spec(tmp_path, ["/bin/sh", "-c", script], max_duration=1, max_restarts=3)
    t0 = time.time()
    supervisor.start(str(spec))
    status = wait_state(spec, (jobspec.TIMEOUT,), timeout=20)
    assert 0.9 < time.time() - t0 < 10
    assert status["exit_code"] == contract.EXIT_PREEMPTED and status["restarts"] == 0
    assert "saving a backup" in (tmp_path / "log/t.log").read_text()


def test_the_deadline_kills_a_program_that_ignores_sigterm(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, ["/bin/sh", "-c", "trap '' TERM; while true; do sleep 0.1; done"], max_duration=1,
                      stop_timeout=0.5)
    supervisor.start(str(spec))
    status = wait_state(spec, (jobspec.TIMEOUT,), timeout=20)
    assert status["exit_code"] == 128 + 9


@pytest.mark.skipif(os.geteuid() != 0, reason="dropping to another user needs root")
def test_the_supervisor_drops_to_the_job_user_when_root(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    nobody = pwd.getpwnam("nobody")
    spec = write_spec(tmp_path, ["/bin/sh", "-c", "id -u; id -g"], user="nobody", group=None)
    supervisor.start(str(spec))
    wait_state(spec, (jobspec.SUCCEEDED,))
    assert (tmp_path / "log/t.log").read_text().split()[-2:] == [str(nobody.pw_uid), str(nobody.pw_gid)]


def test_a_missing_job_user_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    spec = jobspec.load_spec(str(write_spec(tmp_path, ["/bin/true"], user="no-such-user-tfc", group="nogroup")))
    with pytest.raises(jobspec.JobError, match=r"no-such-user-tfc:nogroup does not exist on this host\. Fix: run"):
        supervisor.drop_to(spec)


@pytest.mark.parametrize("content", [{"export/w.bin": b"\x00\x01"}, {}])
def test_finalize_writes_manifest_then_done_even_when_empty(tmp_path: Path, content: dict) -> None:
    model = tmp_path / "model"
    for rel, data in content.items():
        (model / rel).parent.mkdir(parents=True, exist_ok=True)
        (model / rel).write_bytes(data)
    assert supervisor.finalize(str(model), check=True)["changed"] is True
    assert not (model / contract.DONE).exists()
    assert supervisor.finalize(str(model)) == {"changed": True, "files": len(content)}
    assert supervisor.finalize(str(model))["changed"] is False
    assert files.verify_dir(model) == len(content)


# --- unit states --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("props", "state"), [
    ({"ActiveState": "active"}, RUNNING),
    ({"ActiveState": "activating", "SubState": "auto-restart"}, RESTARTING),
    ({"ActiveState": "failed", "Result": "exit-code"}, jobspec.FAILED),
    ({"ActiveState": "failed", "Result": "timeout", "RuntimeMaxUSec": "1min"}, jobspec.TIMEOUT),
    ({"ActiveState": "failed", "Result": "timeout", "RuntimeMaxUSec": "infinity"}, jobspec.FAILED),  # stop timeout
    ({"ActiveState": "inactive", "ExecMainStartTimestampMonotonic": "0"}, jobspec.INACTIVE),
    ({"ActiveState": "inactive", "ExecMainStartTimestampMonotonic": "5", "ExecMainStatus": "3",
      "Result": "success"}, jobspec.PREEMPTED),
    ({"ActiveState": "inactive", "ExecMainStartTimestampMonotonic": "5", "ExecMainStatus": "0",
      "Result": "success"}, jobspec.SUCCEEDED),
    ({"ActiveState": "inactive", "ExecMainStartTimestampMonotonic": "5", "ExecMainStatus": "15",
      "Result": "signal"}, STOPPED),
])
def test_systemd_state(props: dict, state: str) -> None:
    assert jobstatus.systemd_state(props) == state


@pytest.mark.parametrize(("text", "deadline", "state", "code"), [
    (None, False, jobspec.INACTIVE, None),             # never ended on this host (or rebooted: /run is gone)
    ("success exited 0\n", False, jobspec.SUCCEEDED, 0),
    ("success exited 3\n", False, jobspec.PREEMPTED, 3),  # SuccessExitStatus=3: a backup was saved
    ("timeout exited 3\n", True, jobspec.TIMEOUT, 3),     # RuntimeMaxSec=: the deadline, after a backup
    ("timeout killed TERM\n", True, jobspec.TIMEOUT, None),
    ("exit-code exited 1\n", False, STOPPED, 1),
    ("signal killed KILL\n", False, STOPPED, None),
    ("garbage\n", False, jobspec.INACTIVE, None),
])
def test_last_exit_of_an_unloaded_unit(tmp_path: Path, text: str | None, deadline: bool, state: str,
                                       code: int | None) -> None:
    """systemd unloads an inactive unit (its properties read "never started"); ExecStopPost's record decides."""
    if text is not None:
        Path(jobspec.last_exit_path(str(tmp_path))).write_text(text)
    assert jobstatus.last_exit_state(jobstatus.read_last_exit(str(tmp_path)), deadline) == (state, code)


# --- the command line -----------------------------------------------------------------------------------------------
def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO)}  # what a host has: the release on PYTHONPATH
    return subprocess.run(["/usr/bin/python3", "-m", "tfcluster.host.jobstatus", *args], capture_output=True,
                          text=True, env=env, cwd="/", check=False, timeout=60)


def test_status_and_logs_command_line(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, ["/bin/sh", "-c", "for i in 1 2 3; do echo line $i; done"])
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / contract.STATUS).write_text(json.dumps({"epoch": 2, "epochs": 3}))
    supervisor.start(str(spec))
    wait_state(spec, (jobspec.SUCCEEDED,))
    proc = run_cli("status", str(spec), "--lines", "2")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["state"] == jobspec.SUCCEEDED and data["log_tail"] == ["line 2", "line 3"]
    assert data["progress"] == {"epoch": 2, "epochs": 3} and data["done"] is False and data["name"] == "t"
    logs = run_cli("logs", str(spec), "--lines", "3", "--follow")  # the task ended: follow returns at once
    assert logs.returncode == 0 and logs.stdout.splitlines() == ["line 1", "line 2", "line 3"]
    missing = run_cli("status", str(tmp_path / "nope.json"))
    assert missing.returncode == 1 and "nope.json is missing" in json.loads(missing.stdout)["error"]


def test_logs_follow_until_the_task_ends(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, ["/bin/sh", "-c", "echo first; sleep 1.5; echo second"])
    supervisor.start(str(spec))
    wait_state(spec, (RUNNING,))
    proc = subprocess.run([sys.executable, "-m", "tfcluster.host.jobstatus", "logs", str(spec), "--follow"],
                          capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == 0
    assert proc.stdout.splitlines()[-2:] == ["first", "second"]


# --- preflight ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("address", "expected"), [
    ("10.0.0.5:2222", ("10.0.0.5", 2222)), ("[fd00::5]:2222", ("fd00::5", 2222)), ("fd00::5:2222", ("fd00::5", 2222)),
    ("host-1:80", ("host-1", 80)),
])
def test_split_address(address: str, expected: tuple[str, int]) -> None:
    assert preflight.split_address(address) == expected


@pytest.mark.parametrize("address", ["nohost", ":2222", "h:0", "h:99999", "h:x"])
def test_split_address_refuses(address: str) -> None:
    with pytest.raises(ValueError, match="is not host:port"):
        preflight.split_address(address)


@pytest.mark.parametrize(("family", "host", "written"), [
    (socket.AF_INET, "127.0.0.1", "127.0.0.1:{port}"),
    (socket.AF_INET6, "::1", "[::1]:{port}"),  # the bug: the brackets reached bind() ("Name or service not known")
])
def test_port_check_sees_a_busy_port_and_a_free_one(family: int, host: str, written: str) -> None:
    try:
        sock = socket.socket(family)
        sock.bind((host, 0))
    except OSError:
        pytest.skip(f"no {host} here")
    sock.listen()
    port = sock.getsockname()[1]
    address = written.format(port=port)
    try:
        problem = preflight.port_problem(address)
        assert problem is not None and problem.startswith(f"port {address} is not free (") and "pick another" in problem
    finally:
        sock.close()
    assert preflight.port_problem(address) is None


def test_import_and_file_checks_name_what_and_the_fix(tmp_path: Path) -> None:
    assert preflight.import_problem(sys.executable, ["json"]) is None
    problem = preflight.import_problem(sys.executable, ["no_such_module_tfcluster"])
    assert problem and "cannot import no_such_module_tfcluster (ModuleNotFoundError: No module named" in problem
    data = tmp_path / "mnist.npz"
    data.write_bytes(b"data")
    good = files.sha256_file(data)
    assert preflight.file_problems({str(data): good, str(data) + "x": ""}) == [
        f"{data}x is missing. Fix: run site.yml to copy it"]
    assert "is corrupt" in preflight.file_problems({str(data): "0" * 64})[0]


def test_release_digest_check(tmp_path: Path) -> None:
    (tmp_path / "r" / "trainer").mkdir(parents=True)
    (tmp_path / "r" / "trainer" / "a.py").write_text("x = 1\n")
    digest, problem = preflight.digest_problem(str(tmp_path / "r"), "")
    assert digest == files.tree_digest(tmp_path / "r") and problem is None
    _, problem = preflight.digest_problem(str(tmp_path / "r"), "f" * 64)
    assert problem and f"expected {'f' * 12}. Fix: re-run the trainer role" in problem
    assert "is missing" in (preflight.digest_problem(str(tmp_path / "none"), "")[1] or "")


def test_gpu_check_runs_as_the_job_user_in_the_sandbox() -> None:
    argv = preflight.gpu_check_argv("/venv/bin/python", "tfcluster", "tfcluster", ["PrivateDevices=yes", "UMask=0027"])
    assert argv[:6] == ["systemd-run", "--wait", "--pipe", "--collect", "--quiet", "--service-type=exec"]
    assert argv[6:14] == ["-p", "User=tfcluster", "-p", "Group=tfcluster", "-p", "PrivateDevices=yes", "-p",
                          "UMask=0027"]
    assert argv[14:17] == ["--", "/venv/bin/python", "-c"]
    assert preflight.gpu_check_argv("/venv/bin/python", None, None, ["X=1"])[:2] == ["/venv/bin/python", "-c"]


@pytest.mark.parametrize(("output", "seen", "message"), [
    ('{"gpus": 0}', 0, "TensorFlow sees 0 GPU(s) as the job's user in its sandbox, 2 declared. Fix: check the driver"),
    ('{"gpus": 2}', 2, None),
    ("", None, "the GPU check failed (exit 0: no output). Fix: check the driver"),
])
def test_gpu_check_counts_what_tensorflow_lists(output: str, seen: int | None, message: str | None) -> None:
    argv = [sys.executable, "-c", f"print({output!r})"]
    count, problem = preflight.gpu_problem(argv, 2)
    assert count == seen
    assert (problem or "").startswith(message or "") and (problem is None) == (message is None)


def test_default_interface_reads_the_route_table(tmp_path: Path) -> None:
    table = tmp_path / "route"
    table.write_text("Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\tMTU\tWindow\tIRTT\n"
                     "eth1\t00000000\t0100000A\t0003\t0\t0\t200\t00000000\t0\t0\t0\n"
                     "ens5\t00000000\t0101A8C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n"
                     "ens5\t0001A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n")
    assert preflight.default_interface(str(table)) == "ens5"
    assert preflight.default_interface(str(tmp_path / "none")) is None


def test_a_passed_check_is_remembered_until_its_key_changes(tmp_path: Path) -> None:
    key = [*preflight.runtime_fingerprint(sys.executable), "tensorflow"]
    assert not preflight.remembered(str(tmp_path), "imports", key)
    preflight.remember(str(tmp_path), "imports", key)
    assert preflight.remembered(str(tmp_path), "imports", key)
    assert not preflight.remembered(str(tmp_path), "imports", [*key, "another-dist-0.1.dist-info"])
    assert not preflight.remembered("", "imports", key)


# --- what root reads in a job's area (issue 18) ---------------------------------------------------------------------
def status_in_time(spec: Path, seconds: float = 10.0) -> dict:
    """The status command line's answer, which must come back within ``seconds`` (a FIFO must never block it)."""
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO)}
    proc = subprocess.run(["/usr/bin/python3", "-m", "tfcluster.host.jobstatus", "status", str(spec), "--lines", "2"],
                          capture_output=True, text=True, env=env, cwd="/", check=False, timeout=seconds)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def model_with_status(tmp_path: Path) -> Path:
    spec = write_spec(tmp_path, ["/bin/true"])
    (tmp_path / "model").mkdir()
    return spec


def test_a_symlinked_status_json_is_unreadable_and_not_followed(tmp_path: Path) -> None:
    spec = model_with_status(tmp_path)
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"epoch": 7, "secret": "root's"}))
    (tmp_path / "model" / contract.STATUS).symlink_to(secret)
    (tmp_path / "model" / contract.DONE).symlink_to(secret)
    data = status_in_time(spec)
    assert data["progress"] is None and data["done"] is False
    assert data["progress_error"] == f"{contract.STATUS} unreadable: a symbolic link (not followed)"


def test_a_fifo_status_json_never_blocks_the_status(tmp_path: Path) -> None:
    spec = model_with_status(tmp_path)
    os.mkfifo(tmp_path / "model" / contract.STATUS)  # no writer: a blocking open would wait for ever
    started = time.monotonic()
    data = status_in_time(spec)
    assert time.monotonic() - started < 10
    assert data["progress"] is None
    assert data["progress_error"] == f"{contract.STATUS} unreadable: a FIFO, not a regular file"


def test_a_symlinked_model_dir_is_not_entered(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / contract.STATUS).write_text(json.dumps({"epoch": 1}))
    (elsewhere / contract.DONE).write_text("{}")
    (tmp_path / "model").symlink_to(elsewhere)
    facts = jobstatus.model_dir_facts(str(tmp_path / "model"))
    assert facts["progress"] is None and facts["done"] is False
    assert "a symbolic link (not followed)" in facts["progress_error"]


def test_an_oversized_status_json_is_not_read(tmp_path: Path) -> None:
    spec = model_with_status(tmp_path)
    big = tmp_path / "model" / contract.STATUS
    big.write_text('{"epoch": 1, "pad": "' + "x" * jobspec.STATUS_MAX_BYTES + '"}')
    data = status_in_time(spec)
    assert data["progress"] is None
    assert data["progress_error"].startswith(f"{contract.STATUS} unreadable: larger than 1048576 bytes")
    assert data["progress_mtime"] == big.stat().st_mtime  # still a mark of progress for the stall check


def test_a_status_json_within_the_cap_is_read(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / contract.STATUS).write_text(json.dumps({"epoch": 1}))
    (model / contract.DONE).write_text("{}")
    facts = jobstatus.model_dir_facts(str(model))
    assert facts == {"done": True, "progress": {"epoch": 1}, "progress_error": None,
                     "progress_mtime": (model / contract.STATUS).stat().st_mtime}
    assert jobstatus.model_dir_facts(str(tmp_path / "absent")) == {"done": False, "progress": None,
                                                                    "progress_error": None, "progress_mtime": None}


@pytest.mark.parametrize("kind", ["symlink", "fifo"])
def test_the_log_tail_reads_only_a_regular_file(tmp_path: Path, kind: str) -> None:
    secret = tmp_path / "secret"
    secret.write_text("root's line\n")
    log = tmp_path / "t.log"
    if kind == "symlink":
        log.symlink_to(secret)
    else:
        os.mkfifo(log)
    assert jobspec.tail(str(log), 5) == []
    assert jobspec.read_int(str(log)) is None


def test_the_log_tail_reads_its_window_only(tmp_path: Path) -> None:
    log = tmp_path / "t.log"
    log.write_text("first\n" + "x" * 100 + "\nlast\n")
    assert jobspec.tail(str(log), 5, window=10) == ["xxxx", "last"]  # its last 10 bytes only


# --- issue 18: the local slots' own network namespace; root never follows a path of the job's -----------------------
NS_TASK = ("import os, socket, sys, time\n"
           "print('netns', os.stat('/proc/self/ns/net').st_ino, flush=True)\n"
           "if not os.path.exists(sys.argv[2]):\n"
           "    open(sys.argv[2], 'w').close()\n"
           "    sys.exit(7)\n"  # fail once: the restart must land in the same namespace
           "s = socket.socket()\n"
           "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
           "s.bind(('0.0.0.0', int(sys.argv[1])))\n"  # every interface, as TensorFlow binds
           "s.listen()\n"
           "socket.create_connection(('127.0.0.1', int(sys.argv[1])), 2).close()\n"
           "print('listening', flush=True)\n"
           "time.sleep(60)\n")


def _netns_or_skip(tmp_path: Path) -> None:
    from tfcluster.host import netns

    try:
        netns.ensure(str(tmp_path / "probe-ns"), str(REPO), times=(0.5, 0.5))
    except netns.NetnsUnavailable as error:
        pytest.skip(f"this kernel or container forbids network namespaces: {error}")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_log(path: Path, text: str, timeout: float = 20) -> str:
    deadline = time.time() + timeout
    while time.time() < deadline:
        log = path.read_text() if path.exists() else ""
        if text in log:
            return log
        time.sleep(0.05)
    raise AssertionError(f"{text!r} never appeared in {path}: {path.read_text() if path.exists() else ''}")


def test_local_slots_run_in_a_private_network_namespace(tmp_path: Path) -> None:
    """Issue 18: a local slot's port is refused from outside its namespace (any local user, the LAN), while the
    task reaches it inside; a restart stays in the same namespace."""
    _netns_or_skip(tmp_path)
    port = _free_port()
    spec = write_spec(tmp_path, [sys.executable, "-c", NS_TASK, str(port), str(tmp_path / "ran-once")],
                      netns_dir=str(tmp_path / "ns"), max_restarts=2)
    started = supervisor.start(str(spec))
    try:
        assert started["netns"] == "private" and "netns_note" not in started
        log = _wait_log(tmp_path / "log/t.log", "listening")
        inodes = {line.split()[1] for line in log.splitlines() if line.startswith("netns ")}
        assert len(inodes) == 1 and int(inodes.pop()) != os.stat("/proc/self/ns/net").st_ino
        assert jobstatus.status(str(spec))["restarts"] == 1
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=2)
    finally:
        supervisor.stop(str(spec))


def test_allowed_without_a_namespace_the_task_still_runs_and_the_start_says_why(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ALLOW_SHARED_NETWORK=1 (the spec's allow_shared_network); without it the start is refused (issue 38:
    tests/unit/host/test_netns_refusal.py)."""
    from tfcluster.host import netns

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise netns.NetnsUnavailable("`unshare --user --map-current-user --keep-caps --net`: unshare: unshare "
                                     "failed: Operation not permitted",
                                     "sudo sysctl -w kernel.unprivileged_userns_clone=1 (or run as root)")

    monkeypatch.setattr(netns, "start_holder", refuse)
    spec = write_spec(tmp_path, ["/bin/sh", "-c", "echo ran"], netns_dir=str(tmp_path / "ns"),
                      allow_shared_network=True)
    started = supervisor.start(str(spec))
    assert started["netns"] == "shared"
    assert started["netns_note"].startswith("the local slots of job t run without a private network namespace (")
    assert "Operation not permitted" in started["netns_note"]
    assert started["netns_note"].endswith("Fix: sudo sysctl -w kernel.unprivileged_userns_clone=1 (or run as root)")
    wait_state(spec, (jobspec.SUCCEEDED,))


def test_a_spec_without_netns_dir_runs_on_the_host_network(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, ["/bin/sh", "-c", "readlink /proc/self/ns/net"])
    assert "netns" not in supervisor.start(str(spec))
    wait_state(spec, (jobspec.SUCCEEDED,))
    assert os.readlink("/proc/self/ns/net") in (tmp_path / "log/t.log").read_text()


@pytest.mark.parametrize("kind", ["symlink", "hardlink"])
def test_the_log_is_never_opened_through_a_link(tmp_path: Path, kind: str) -> None:
    """Root appends the task's output to the log: a link the job planted there must not send it elsewhere."""
    victim = tmp_path / "victim"
    victim.write_text("root's own\n")
    spec = write_spec(tmp_path, ["/bin/sh", "-c", "echo written"])
    (tmp_path / "log").mkdir()
    if kind == "symlink":
        (tmp_path / "log/t.log").symlink_to(victim)
    else:
        os.link(victim, tmp_path / "log/t.log")
    with pytest.raises(jobspec.JobError, match=r"log .*t\.log is .*\. Fix: remove it and start the job again"):
        supervisor.start(str(spec))
    assert victim.read_text() == "root's own\n"


@pytest.fixture
def open_tmp():  # yields a Path
    """A 0755 directory under /tmp (pytest's tmp_path is root's own, 0700: the job user could not reach it)."""
    import shutil
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="tfc-finalize-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _model_dir_of_nobody(parent: Path) -> tuple[Path, pwd.struct_passwd]:
    nobody = pwd.getpwnam("nobody")
    parent.mkdir(mode=0o755, exist_ok=True)
    model = parent / "model"
    model.mkdir(mode=0o750)
    os.chown(model, nobody.pw_uid, nobody.pw_gid)
    return model, nobody


@pytest.mark.skipif(os.geteuid() != 0, reason="finalize drops from root to the model dir's owner")
def test_finalize_never_chowns_a_link_the_job_swapped_in(open_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 18: the job swapped MANIFEST for a link to a root file between the write and the chown."""
    model, nobody = _model_dir_of_nobody(open_tmp)
    victim = open_tmp / "victim"
    victim.write_text("root's own\n")
    real = supervisor.atomic_write_text

    def write_then_swap(path: str, text: str, *args: object, **kwargs: object) -> None:
        real(path, text, *args, **kwargs)
        if os.path.basename(path) == contract.DONE:  # the job, right after DONE: MANIFEST becomes a link
            manifest = os.path.join(os.path.dirname(path), contract.MANIFEST)
            os.unlink(manifest)
            os.symlink(victim, manifest)

    monkeypatch.setattr(supervisor, "atomic_write_text", write_then_swap)
    supervisor.finalize(str(model))
    assert victim.stat().st_uid == 0 and victim.stat().st_gid == 0
    assert (model / contract.DONE).stat().st_uid == nobody.pw_uid  # written as the job user, no chown needed


@pytest.mark.skipif(os.geteuid() != 0, reason="finalize drops from root to the model dir's owner")
def test_finalize_reads_the_model_dir_as_its_owner_not_as_root(open_tmp: Path) -> None:
    model, nobody = _model_dir_of_nobody(open_tmp)
    (model / "w.bin").write_bytes(b"w")
    os.chown(model / "w.bin", nobody.pw_uid, nobody.pw_gid)
    supervisor.finalize(str(model))
    assert (model / contract.MANIFEST).stat().st_uid == nobody.pw_uid
    assert files.verify_dir(model) == 1
    # A file only root may read (e.g. a link target the job cannot read) is not hashed by root: refused.
    other, _ = _model_dir_of_nobody(open_tmp / "second")
    secret = other / "secret"
    secret.write_text("root's only\n")
    secret.chmod(0o600)
    with pytest.raises(jobspec.JobError, match=r"finalize of model dir .* as its owner \(uid \d+\) failed: "
                                               r"PermissionError.*secret.*\. Fix: every file"):
        supervisor.finalize(str(other))
    assert not (other / contract.DONE).exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="finalize as root")
def test_finalize_refuses_a_model_dir_that_is_a_link(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "model").symlink_to(elsewhere)
    with pytest.raises(jobspec.JobError, match=r"is not a directory of its own .*never written through a link"):
        supervisor.finalize(str(tmp_path / "model"))
    assert list(elsewhere.iterdir()) == []


def test_serve_answers_a_status_line_per_question_until_end_of_input_or_idle(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, ["/bin/true"])
    read_fd, write_fd = os.pipe()
    os.write(write_fd, b"\n\nany text asks too\n")
    os.close(write_fd)
    out = io.StringIO()
    try:
        assert jobstatus.serve(str(spec), None, 3, stdin_fd=read_fd, out=out) == 0  # end of input: done
    finally:
        os.close(read_fd)
    answers = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [a["name"] for a in answers] == ["t"] * 3 and answers[0].keys() == jobstatus.status(str(spec)).keys()
    missing = io.StringIO()
    read_fd, write_fd = os.pipe()
    os.write(write_fd, b"\n")
    try:
        began = time.monotonic()
        assert jobstatus.serve(str(tmp_path / "none.json"), None, 3, stdin_fd=read_fd, out=missing, idle=0.2) == 0
        assert time.monotonic() - began < 5  # no question for `idle` s: it ends though its input is open
    finally:
        os.close(read_fd)
        os.close(write_fd)
    (error,) = [json.loads(line) for line in missing.getvalue().splitlines()]
    assert "none.json is missing" in error["error"]
