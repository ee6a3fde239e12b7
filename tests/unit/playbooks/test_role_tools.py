"""The roles' small Python tools (tfjob, release, manifest) and tools/demo.py: pure functions and their messages."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[3]
ROLES = REPO / "playbooks" / "roles"


def load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


tfjob = load("tfjob", ROLES / "tf_job/files/tfjob.py")
release = load("release", ROLES / "trainer/files/release.py")
manifest = load("manifest", ROLES / "collector/files/manifest.py")


def tf_config(index: int, n: int = 2) -> str:
    return json.dumps({"cluster": {"worker": [f"127.0.0.1:{2000 + i}" for i in range(n)]},
                       "task": {"type": "worker", "index": index}})


def host(task_type: str, index: int, port: int, tfc: str | None = None) -> dict:
    return {"tfcluster_task_type": task_type, "tfcluster_task_index": index,
            "tfcluster_address": f"127.0.0.1:{port}", "tfcluster_tf_config": tfc or json.dumps(
                {"cluster": {}, "task": {"type": task_type, "index": index}})}


# --- env files --------------------------------------------------------------------------------------------------

def test_parse_env_file_quotes_and_comments() -> None:
    text = "# managed\nTF_CONFIG='{\"a\": \"b c\"}'\nX=\"q \\\"d\\\"\"\n\nPLAIN=1\n"
    assert tfjob.parse_env_file(text) == {"TF_CONFIG": '{"a": "b c"}', "X": 'q "d"', "PLAIN": "1"}


@pytest.mark.parametrize("line", ["no equals sign", "BAD KEY=1", "=value"])
def test_parse_env_file_rejects_bad_lines(line: str) -> None:
    with pytest.raises(tfjob.TfJobError, match="is not KEY=VALUE"):
        tfjob.parse_env_file(line)


# --- exit codes and systemd states ------------------------------------------------------------------------------

@pytest.mark.parametrize(("code", "outcome"), [(0, "succeeded"), (3, "preempted"), (1, "failure"), (2, "failure"),
                                               (-9, "failure")])
def test_classify_exit(code: int, outcome: str) -> None:
    assert tfjob.classify_exit(code, tfjob.SPEC_DEFAULTS)[0] == outcome


def test_classify_exit_reports_signals_like_a_shell() -> None:
    assert tfjob.classify_exit(-9, tfjob.SPEC_DEFAULTS) == ("failure", 137, 9)


@pytest.mark.parametrize(("props", "state"), [
    ({"ActiveState": "active"}, "running"),
    ({"ActiveState": "activating", "SubState": "auto-restart"}, "restarting"),
    ({"ActiveState": "failed"}, "failed"),
    ({"ActiveState": "inactive", "ExecMainStartTimestampMonotonic": "0"}, "inactive"),
    ({"ActiveState": "inactive", "ExecMainStartTimestampMonotonic": "5", "ExecMainStatus": "3",
      "Result": "success"}, "preempted"),
    ({"ActiveState": "inactive", "ExecMainStartTimestampMonotonic": "5", "ExecMainStatus": "0",
      "Result": "success"}, "succeeded"),
    ({"ActiveState": "inactive", "ExecMainStartTimestampMonotonic": "5", "ExecMainStatus": "15",
      "Result": "signal"}, "stopped"),
])
def test_systemd_state(props: dict, state: str) -> None:
    assert tfjob.systemd_state(props) == state


@pytest.mark.parametrize(("text", "state", "code"), [
    (None, "inactive", None),                        # never ended on this host (or rebooted: /run is gone)
    ("success exited 0\n", "succeeded", 0),
    ("success exited 3\n", "preempted", 3),          # SuccessExitStatus=3: spot preemption, not a failure
    ("exit-code exited 1\n", "stopped", 1),
    ("signal killed KILL\n", "stopped", None),
    ("garbage\n", "inactive", None),
])
def test_last_exit_of_an_unloaded_unit(tmp_path: Path, text: str | None, state: str, code: int | None) -> None:
    """systemd unloads an inactive unit (its properties read "never started"); ExecStopPost's record decides."""
    if text is not None:
        (tmp_path / "last-exit").write_text(text)
    assert tfjob.last_exit_state(tfjob.read_last_exit(str(tmp_path))) == (state, code)


# --- the supervisor ---------------------------------------------------------------------------------------------

def write_spec(tmp: Path, argv: list[str], **more: object) -> Path:
    (tmp / "job.env").write_text(f"TF_CONFIG='{tf_config(0)}'\nGREETING=hello\n")
    spec = {"name": "t", "argv": argv, "env_file": str(tmp / "job.env"), "workdir": str(tmp),
            "run_dir": str(tmp / "run"), "log": str(tmp / "log/t.log"), "model_dir": str(tmp / "model"),
            "restart_sec": 0.1, **more}
    path = tmp / "job.json"
    path.write_text(json.dumps(spec))
    return path


def wait_state(spec: Path, states: tuple[str, ...], timeout: float = 10) -> dict:
    deadline = time.time() + timeout
    while time.time() < deadline:
        status = tfjob.status(str(spec), None)
        if status["state"] in states:
            return status
        time.sleep(0.05)
    raise AssertionError(f"state never became {states}: {tfjob.status(str(spec), None)}")


def test_supervisor_runs_with_the_env_file_only_and_start_is_idempotent(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEAK", "from-the-caller")
    spec = write_spec(tmp_path, ["/bin/sh", "-c", "echo $GREETING ${LEAK:-clean} $TF_CONFIG; sleep 30"])
    first = tfjob.start(str(spec))
    try:
        assert first["changed"] is True
        assert tfjob.start(str(spec))["changed"] is False
        status = wait_state(spec, ("running",))
        time.sleep(0.3)
        log = (tmp_path / "log/t.log").read_text()
        assert "hello clean" in log and '"index": 0' in log
        assert status["pid"] and Path(f"/proc/{status['pid']}").exists()
    finally:
        stopped = tfjob.stop(str(spec))
    assert stopped["changed"] is True
    assert wait_state(spec, ("stopped",))["pid"] is None
    assert tfjob.stop(str(spec))["changed"] is False


def test_supervisor_restarts_on_failure_then_fails(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, ["/bin/sh", "-c", "echo run; exit 7"], max_restarts=2)
    tfjob.start(str(spec))
    status = wait_state(spec, ("failed",))
    assert status["exit_code"] == 7 and status["restarts"] == 2
    assert (tmp_path / "log/t.log").read_text().count("run") == 3


def test_exit_3_is_preemption_not_restarted(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, ["/bin/sh", "-c", "echo run; exit 3"], max_restarts=5)
    tfjob.start(str(spec))
    status = wait_state(spec, ("preempted",))
    assert status["restarts"] == 0 and status["exit_code"] == 3


def test_finalize_writes_manifest_then_done_and_the_collector_verifies_it(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, ["/bin/true"])
    model = tmp_path / "model" / "export"
    model.mkdir(parents=True)
    (model / "w.bin").write_bytes(b"\x00\x01")
    (model.parent / "__pycache__").mkdir()
    assert tfjob.finalize(str(spec))["changed"] is True
    assert tfjob.finalize(str(spec))["changed"] is False
    lines = (tmp_path / "model/MANIFEST.sha256").read_text().splitlines()
    expected = hashlib.sha256(b"\x00\x01").hexdigest()
    assert lines == [f"{expected}  export/w.bin"]
    assert manifest.verify(str(tmp_path / "model")) == 1


def test_port_free(tmp_path: Path) -> None:
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    port = sock.getsockname()[1]
    try:
        free, message = tfjob.port_free("127.0.0.1", port)
        assert not free and f"port 127.0.0.1:{port} is not free" in message and "pick another port" in message
    finally:
        sock.close()
    assert tfjob.port_free("127.0.0.1", port)[0]


# --- inventory checks -------------------------------------------------------------------------------------------

def test_check_inventory_accepts_a_valid_cluster() -> None:
    hosts = {"worker-0": host("worker", 0, 2000, tf_config(0)), "worker-1": host("worker", 1, 2001, tf_config(1))}
    assert tfjob.check_inventory(hosts) == []


@pytest.mark.parametrize(("hosts", "message"), [
    ({}, "the inventory has no hosts in group tfcluster"),
    ({"a": host("boss", 0, 1)}, "a: tfcluster_task_type 'boss' is not chief/worker/ps/evaluator"),
    ({"a": {**host("worker", 0, 1), "tfcluster_task_index": -1}}, "a: tfcluster_task_index -1 is not"),
    ({"a": host("worker", 0, 1), "b": host("worker", 1, 1)}, "b: address 127.0.0.1:1 is also used by a"),
    ({"a": host("worker", 0, 1), "b": host("worker", 0, 2)}, "b: slot worker:0 is also held by a"),
    ({"a": host("worker", 0, 1), "b": host("worker", 2, 2)}, "worker indices [0, 2] are not contiguous from 0"),
    ({"a": {**host("worker", 0, 1), "tfcluster_address": "nope"}}, "a: tfcluster_address 'nope' is not host:port"),
    ({"a": {**host("worker", 0, 1), "tfcluster_tf_config": "{"}}, "a: tfcluster_tf_config is missing or not"),
    ({"a": host("worker", 0, 1, tf_config(1))}, "a: tfcluster_tf_config task worker:1 does not match the slot"),
    ({"a": host("ps", 0, 1)}, "no chief and no worker in the inventory"),
    ({"a": host("chief", 0, 1), "b": host("chief", 0, 2)}, "b: slot chief:0 is also held by a"),
])
def test_check_inventory_names_the_host_and_the_fix(hosts: dict, message: str) -> None:
    problems = tfjob.check_inventory(hosts)
    assert any(message in problem for problem in problems), problems
    assert all("Fix:" in problem for problem in problems)


# --- the wait decision ------------------------------------------------------------------------------------------

def result(state: str, **more: object) -> dict:
    return {"rc": 0, "stdout": json.dumps({"state": state, "restarts": 0, "log_tail": ["last line"], **more})}


def payload(*states: dict, **more: object) -> dict:
    names = [f"worker-{i}" for i in range(len(states))]
    return {"now": 1000.0, "started_at": 900.0, "timeout": 3600, "stall_timeout": 600, "chief": "worker-0",
            "require_done": True, "names": names, "results": list(states), "task_types": ["worker"] * len(states),
            "task_indexes": list(range(len(states))), **more}


def test_evaluate_running_prints_a_line_per_worker() -> None:
    progress = {"state": "training", "epoch": 2, "epochs": 3, "step": 10, "steps_per_epoch": 100,
                "examples_per_sec": 12345.6, "loss": 0.5, "accuracy": 0.9}
    out = tfjob.evaluate(payload(result("running", progress=progress), result("running")))
    assert out["decision"] == "running"
    assert out["lines"][0].startswith("worker-0   worker:0   running/training")
    assert "epoch 2/3" in out["lines"][0] and "step 10/100" in out["lines"][0] and "12.3k ex/s" in out["lines"][0]
    assert "starting (no status.json yet)" in out["lines"][1]


def test_evaluate_done_needs_the_chiefs_marker() -> None:
    assert tfjob.evaluate(payload(result("succeeded", done=True), result("succeeded")))["decision"] == "done"
    out = tfjob.evaluate(payload(result("succeeded", done=False, model_dir="/m"), result("succeeded")))
    assert out["decision"] == "failed" and "wrote no DONE marker in /m" in out["message"]
    relaxed = tfjob.evaluate(payload(result("succeeded"), result("succeeded"), require_done=False))
    assert relaxed["decision"] == "done"


@pytest.mark.parametrize(("second", "decision", "text"), [
    (result("failed", exit_code=1, restarts=3), "failed", "job failed on worker-1 (exit code 1, restarts 3)"),
    (result("lost"), "failed", "job lost on worker-1"),
    (result("stopped"), "failed", "job is stopped on worker-1 while the others run"),
    ({"unreachable": True, "msg": "ssh: timeout"}, "failed", "host unreachable: ssh: timeout"),
    ({"rc": 1, "stdout": "", "stderr": "boom"}, "failed", "could not read job status (rc=1): boom"),
    (result("preempted"), "preempted", "worker-1 was preempted (exit 3, a backup was saved)"),
])
def test_evaluate_failures_name_the_host(second: dict, decision: str, text: str) -> None:
    out = tfjob.evaluate(payload(result("running"), second))
    assert out["decision"] == decision and out["culprit"] == "worker-1"
    assert text in out["message"]


def test_evaluate_timeout_and_stall() -> None:
    out = tfjob.evaluate(payload(result("running"), started_at=0.0, timeout=10))
    assert out["decision"] == "timeout" and "did not finish within 10s" in out["message"]
    first = tfjob.evaluate(payload(result("running"), stall_timeout=5, now=100.0))
    assert first["decision"] == "running"
    later = tfjob.evaluate(payload(result("running"), stall_timeout=5, now=106.0, seen=first["seen"]))
    assert later["decision"] == "stalled" and "worker-0 made no progress for 5s" in later["message"]
    moving = tfjob.evaluate(payload(result("running", log_mtime=105.0), stall_timeout=5, now=106.0,
                                    seen=first["seen"]))
    assert moving["decision"] == "running"


@pytest.mark.parametrize(("before", "after", "decision"), [
    ("running", "lost", "failed"),          # rebooted mid-run: the exit record in /run is gone with it
    ("restarting", "lost", "failed"),
    ("succeeded", "succeeded", "done"),     # rebooted after it finished: it did finish
    (None, "inactive", "failed"),           # never seen running: inactive while the other one runs
])
def test_evaluate_remembers_what_the_last_poll_saw(before: str | None, after: str, decision: str) -> None:
    first = tfjob.evaluate(payload(result("succeeded", done=True), result(before or "inactive")))
    seen = first["seen"] if before else {}
    other = "succeeded" if decision == "done" else "running"
    out = tfjob.evaluate(payload(result(other, done=True), result("inactive"), seen=seen))
    assert out["seen"]["worker-1"]["state"] == after
    assert out["decision"] == decision, out
    if after == "lost":
        assert out["culprit"] == "worker-1"
        assert f"job lost on worker-1: it was {before} at the last poll and now has no unit" in out["message"]
        assert "worker-1   worker:1   lost" in out["lines"][1]


def test_evaluate_lost_even_when_every_other_task_finished() -> None:
    """The race a reboot can hit: the others exited 0 before the rebooted one's vanishing is seen."""
    first = tfjob.evaluate(payload(result("running"), result("running")))
    out = tfjob.evaluate(payload(result("succeeded", done=True), result("inactive"), seen=first["seen"]))
    assert out["decision"] == "failed" and out["culprit"] == "worker-1"


def test_evaluate_all_stopped() -> None:
    out = tfjob.evaluate(payload(result("inactive"), result("stopped")))
    assert out["decision"] == "stopped"


def test_evaluate_cli_reads_stdin() -> None:
    proc = subprocess.run([sys.executable, str(ROLES / "tf_job/files/tfjob.py"), "evaluate"],
                          input=json.dumps(payload(result("succeeded", done=True))), capture_output=True, text=True,
                          check=True)
    assert json.loads(proc.stdout)["decision"] == "done"


# --- releases and manifests -------------------------------------------------------------------------------------

def test_stage_is_content_addressed_and_skips_caches(tmp_path: Path) -> None:
    src = tmp_path / "pkg"
    (src / "__pycache__").mkdir(parents=True)
    (src / "__init__.py").write_text("x = 1\n")
    (src / "__pycache__" / "x.pyc").write_bytes(b"junk")
    one = release.stage(str(tmp_path / "stage"), [f"trainer={src}"])
    two = release.stage(str(tmp_path / "stage"), [f"trainer={src}"])
    assert one == two and Path(one["archive"]).is_file()
    assert release.tree_digest(one["path"]) == one["digest"]
    assert not list(Path(one["path"]).rglob("*.pyc"))
    (src / "__init__.py").write_text("x = 2\n")
    assert release.stage(str(tmp_path / "stage"), [f"trainer={src}"])["digest"] != one["digest"]


@pytest.mark.parametrize(("source", "message"), [("noequals", "a source must be NAME=PATH"),
                                                 ("x=/does/not/exist", "source /does/not/exist does not exist")])
def test_stage_rejects_bad_sources(tmp_path: Path, source: str, message: str) -> None:
    with pytest.raises(release.ReleaseError, match=message):
        release.stage(str(tmp_path / "stage"), [source])


def test_digest_of_a_missing_release_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(release.ReleaseError, match="deploy the trainer first"):
        release.tree_digest(str(tmp_path / "nope"))


@pytest.mark.parametrize(("text", "message"), [
    ("", "lists no files"),
    ("abc  x\n", "is not '<sha256>  <path>'"),
    (f"{'0' * 64}  /etc/passwd\n", "names an unsafe path: '/etc/passwd'"),
    (f"{'0' * 64}  a/../../b\n", "names an unsafe path"),
    (f"{'0' * 64}  DONE\n", "names an unsafe path: 'DONE'"),
])
def test_manifest_parse_rejects(text: str, message: str) -> None:
    with pytest.raises(manifest.ManifestError, match=message):
        manifest.parse(text)


def test_manifest_verify_problems(tmp_path: Path) -> None:
    with pytest.raises(manifest.ManifestError, match="no DONE marker: refusing an unfinished checkpoint"):
        manifest.verify(str(tmp_path))
    (tmp_path / "DONE").write_text("{}")
    with pytest.raises(manifest.ManifestError, match=r"has no MANIFEST\.sha256"):
        manifest.verify(str(tmp_path))
    (tmp_path / "a").write_text("a")
    (tmp_path / "MANIFEST.sha256").write_text(f"{'0' * 64}  a\n{'1' * 64}  gone\n")
    with pytest.raises(manifest.ManifestError, match="sha256 mismatch: a; missing gone"):
        manifest.verify(str(tmp_path))


# --- the demo summary -------------------------------------------------------------------------------------------

def test_demo_summary_and_plot(tmp_path: Path) -> None:
    from tools import demo

    (tmp_path / "DONE").write_text("{}")
    (tmp_path / "metrics.json").write_text(json.dumps({
        "strategy": "multi_worker_mirrored", "workers": 2, "epochs": 2, "global_batch": 128, "accuracy": 0.91,
        "test_accuracy": 0.92, "loss": 0.3, "examples_per_sec": 9876.5, "history": {"loss": [1.0, 0.3],
                                                                                      "accuracy": [0.7, 0.91]}}))
    lines = demo.run(tmp_path)
    text = "\n".join(lines)
    assert "train 0.9100   test 0.9200" in text and "9,876 examples/s" in text and str(tmp_path) in text
    assert (tmp_path / "training.png").read_bytes()[:4] == b"\x89PNG"


def test_demo_refuses_an_unfinished_job(tmp_path: Path) -> None:
    from tools import demo

    with pytest.raises(demo.DemoError, match="holds no finished job"):
        demo.run(tmp_path)
    (tmp_path / "DONE").write_text("{}")
    with pytest.raises(demo.DemoError, match=r"metrics\.json is missing or not JSON"):
        demo.run(tmp_path)


# --- the collector's pull (stream and local copy) -----------------------------------------------------------------

def model_dir(root: Path, files: dict[str, bytes], optional: dict[str, bytes] | None = None) -> tuple[Path, str]:
    """A finished model dir: the files, their MANIFEST.sha256 and DONE; returns it and the manifest text."""
    root.mkdir(parents=True)
    for rel, data in {**files, **(optional or {})}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    text = "".join(f"{hashlib.sha256(data).hexdigest()}  {rel}\n" for rel, data in sorted(files.items()))
    (root / "MANIFEST.sha256").write_text(text)
    (root / "DONE").write_text("{}\n")
    return root, text


@pytest.fixture
def fake_ssh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`ssh ... -- HOST COMMAND` that runs COMMAND here with sh, logging its argv: the real tar, no network."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "ssh-argv.json"
    script = bin_dir / "ssh"
    script.write_text(f"#!{sys.executable}\nimport json, subprocess, sys\n"
                      f"open({str(log)!r}, 'w').write(json.dumps(sys.argv[1:]))\n"
                      "sys.exit(subprocess.call(['sh', '-c', sys.argv[-1]]))\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")
    return log


FILES = {"export/saved_model.pb": b"graph" * 1000, "export/variables/v.data": bytes(range(256)) * 4096,
         "checkpoints/ckpt-1.index": b"idx", "metrics.json": b'{"epochs": 3}'}


def request(src: Path, text: str, **more: object) -> dict:
    return {"name": "chief-0", "connection": "ssh", "host": "10.0.0.5", "port": 2222, "user": "ubuntu",
            "private_key_file": "~/.ssh/k", "ssh_args": "-o ControlMaster=auto", "ssh_common_args": "",
            "ssh_extra_args": "", "host_key_checking": False, "model_dir": str(src), "manifest": text,
            "optional": ["status.json", "config.json", "metrics.json"], **more}


@pytest.mark.parametrize("connection", ["ssh", "local"])
def test_pull_brings_every_file_home_verified_and_is_idempotent(tmp_path: Path, fake_ssh: Path, connection: str,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(manifest, "THREADED_WRITE", 100_000)  # the 1 MiB file takes the two-thread path
    src, text = model_dir(tmp_path / "chief", FILES, optional={"status.json": b"{}"})
    dest = tmp_path / "home" / "job"
    out = manifest.pull(str(dest), request(src, text, connection=connection))
    assert out["changed"] is True and out["files"] == len(FILES) + 3  # + MANIFEST, DONE, status.json
    got = {str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file()}
    assert got == {*FILES, "MANIFEST.sha256", "DONE", "status.json"}  # config.json is optional and absent
    assert manifest.verify(str(dest)) == len(FILES)
    assert fake_ssh.exists() == (connection == "ssh")
    assert manifest.pull(str(dest), request(src, text, connection=connection))["changed"] is False
    assert sorted(p.name for p in dest.parent.iterdir()) == ["job"]  # no staging or old copy left


def test_pull_replaces_an_older_copy_whole(tmp_path: Path, fake_ssh: Path) -> None:
    dest = tmp_path / "home" / "job"
    dest.mkdir(parents=True)
    (dest / "stale.bin").write_bytes(b"old run")
    src, text = model_dir(tmp_path / "chief", FILES)
    manifest.pull(str(dest), request(src, text))
    assert not (dest / "stale.bin").exists() and (dest / "DONE").exists()


@pytest.mark.parametrize(("damage", "message"), [
    (lambda src: (src / "export/saved_model.pb").write_bytes(b"evil"), "sha256 mismatch: export/saved_model.pb"),
    (lambda src: (src / "checkpoints/ckpt-1.index").unlink(), "missing checkpoints/ckpt-1.index"),
    (lambda src: (src / "DONE").unlink(), "missing DONE"),
])
def test_pull_refuses_a_damaged_checkpoint_and_writes_nothing(tmp_path: Path, fake_ssh: Path, damage,
                                                              message: str) -> None:
    src, text = model_dir(tmp_path / "chief", FILES)
    damage(src)
    dest = tmp_path / "home" / "job"
    with pytest.raises(manifest.ManifestError) as error:
        manifest.pull(str(dest), request(src, text))
    assert message in str(error.value)
    assert f"collecting {src} from chief-0 failed" in str(error.value)
    assert not dest.exists() and list(dest.parent.iterdir()) == []


def test_pull_names_the_host_when_ssh_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ssh").write_text("#!/bin/sh\necho 'ssh: connect to host 10.0.0.5 port 2222: No route to host' >&2\n"
                                 "exit 255\n")
    (bin_dir / "ssh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    src, text = model_dir(tmp_path / "chief", FILES)
    proc = subprocess.run([sys.executable, str(ROLES / "collector/files/manifest.py"), "pull", str(tmp_path / "d")],
                          input=json.dumps(request(src, text)), capture_output=True, text=True, check=False)
    assert proc.returncode == 1
    msg = json.loads(proc.stdout)["msg"]
    assert "from chief-0 failed" in msg and "No route to host" in msg and "exited 255" in msg
    assert not (tmp_path / "d").exists()


def test_receive_refuses_what_was_not_asked_for(tmp_path: Path) -> None:
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as archive:
        link = tarfile.TarInfo("DONE")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        archive.addfile(link)
    buf.seek(0)
    with pytest.raises(manifest.ManifestError, match=r"'DONE', which was not asked for \(or is not a regular file"):
        manifest.receive(buf, str(tmp_path), {"DONE": None})


def test_ssh_argv_follows_ansibles_settings() -> None:
    conn = {"host": "10.0.0.5", "port": 2222, "user": "ubuntu", "private_key_file": "/k",
            "ssh_args": "-o ControlMaster=auto", "ssh_common_args": "-o 'ProxyCommand=ssh -W %h:%p b'",
            "ssh_extra_args": "-4", "host_key_checking": False, "ciphers": "aes128-gcm@openssh.com,aes128-ctr"}
    argv = manifest.ssh_argv(conn, "tar -cf - x")
    assert argv == ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o", "ControlMaster=auto", "-o",
                    "ProxyCommand=ssh -W %h:%p b", "-4", "-o", "Ciphers=aes128-gcm@openssh.com,aes128-ctr", "-p",
                    "2222", "-l", "ubuntu", "-i", "/k", "--", "10.0.0.5", "tar -cf - x"]
    plain = manifest.ssh_argv({"host": "h", "port": None, "user": None, "host_key_checking": True}, "true")
    assert plain == ["ssh", "-o", "BatchMode=yes", "--", "h", "true"]
    with pytest.raises(manifest.ManifestError, match="names no host"):
        manifest.ssh_argv({"host": ""}, "true")
