"""The job's Ansible modules run in-process (ansible's patch_module_args): job (rendered, started, stopped,
finalized), job_info, job_preflight."""

from __future__ import annotations

import grp
import json
import os
import socket
import stat
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from ansible.module_utils.testing import patch_module_args

from tfcluster.core import contract, files
from tfcluster.host import jobspec

REPO = Path(__file__).resolve().parents[3]
from ansible_collections.tfcluster.cluster.plugins.modules import job, job_info, job_preflight  # noqa: E402


def run(module: Any, args: dict[str, Any], capsys: pytest.CaptureFixture[str], check: bool = False,
        diff: bool = False) -> dict[str, Any]:
    with patch_module_args({**args, "_ansible_check_mode": check, "_ansible_diff": diff}), \
            pytest.raises(SystemExit):
        module.main()
    return json.loads(capsys.readouterr().out)


def spec_data(tmp: Path, argv: list[str]) -> dict[str, Any]:
    return {"name": "t", "argv": argv, "env_file": str(tmp / "etc/t.env"), "workdir": str(tmp),
            "run_dir": str(tmp / "run/t"), "log": str(tmp / "log/t.log"), "model_dir": str(tmp / "model"),
            "restart_sec": 0.1, "pythonpath": str(REPO), "unit": None, "user": None, "group": None}


def render_args(tmp: Path, argv: list[str], **more: Any) -> dict[str, Any]:
    return {"state": "rendered", "spec": str(tmp / "etc/t.json"), "spec_data": spec_data(tmp, argv),
            "env": {contract.ENV_JOB: "t", "ARG": "x'; touch MARKER; '"}, "header": "# job t", **more}


def test_rendered_writes_what_differs_with_modes_and_a_diff(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = render_args(tmp_path, ["/bin/true"], unit="[Service]\nExecStart=/bin/true\n",
                       unit_path=str(tmp_path / "t.service"))
    dry = run(job, args, capsys, check=True, diff=True)
    assert dry["changed"] is True and dry["unit_changed"] is True and not (tmp_path / "etc").exists()
    assert {d["after_header"] for d in dry["diff"]} >= {str(tmp_path / "etc/t.env"), str(tmp_path / "t.service")}
    first = run(job, args, capsys)
    assert first["changed"] is True and first["unit_changed"] is True
    for name in ("etc/t.env", "etc/t.json"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o640, name
    assert stat.S_IMODE((tmp_path / "model").stat().st_mode) == 0o750
    assert jobspec.parse_env_file((tmp_path / "etc/t.env").read_text())["ARG"] == "x'; touch MARKER; '"
    assert jobspec.load_spec(str(tmp_path / "etc/t.json"))["argv"] == ["/bin/true"]
    again = run(job, args, capsys)
    assert again["changed"] is False and again["unit_changed"] is False
    (tmp_path / "etc/t.env").chmod(0o644)
    assert run(job, args, capsys)["written"] == [str(tmp_path / "etc/t.env")]


@pytest.mark.parametrize(("affinity", "env", "expected"), [
    ([0], {}, str(contract.INTEROP_THREADS_MIN)),  # a pinned local slot: TensorFlow would size one inter-op thread
    ([0, 1], {}, None),
    ([0], {contract.ENV_INTEROP_THREADS: "6"}, "6"),  # the job's own value (ANSIBLE_ARGS' tf_job_extra_env) wins
])
def test_rendered_gives_a_one_cpu_task_the_inter_op_floor(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          affinity: list[int], env: dict[str, str],
                                                          expected: str | None) -> None:
    args = render_args(tmp_path, ["/bin/true"])
    args["spec_data"]["cpu_affinity"] = affinity
    args["env"].update(env)
    assert run(job, args, capsys)["changed"] is True
    written = jobspec.parse_env_file((tmp_path / "etc/t.env").read_text())
    assert written.get(contract.ENV_INTEROP_THREADS) == expected
    assert run(job, args, capsys)["changed"] is False  # the same decision on a second run


def test_rendered_refuses_a_bad_environment(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = run(job, {**render_args(tmp_path, ["/bin/true"]), "env": {"BAD NAME": "x"}}, capsys)
    assert out["failed"] and "environment variable name 'BAD NAME' is not valid" in out["msg"]


def test_rendered_refuses_local_slots_that_get_no_namespace_before_writing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 38: the render (before the gang start) refuses, so no slot starts; ALLOW_SHARED_NETWORK=1 renders."""
    from ansible_collections.tfcluster.cluster.plugins.module_utils.host import netns  # the module's own copy

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise netns.NetnsUnavailable("no network namespace could be made (`unshare --net`: Operation not "
                                     "permitted)", "sudo sysctl -w user.max_user_namespaces=15000 (or run as root)")

    monkeypatch.setattr(netns, "probe", refuse)
    args = render_args(tmp_path, ["/bin/true"])
    args["spec_data"]["netns_dir"] = str(tmp_path / "ns")
    out = run(job, args, capsys)
    assert out["failed"] and "the local slots of job t were not started" in out["msg"]
    assert ("Fix: sudo sysctl -w user.max_user_namespaces=15000 (or run as root), or ALLOW_SHARED_NETWORK=1 to run"
            in out["msg"])
    assert not (tmp_path / "etc").exists() and not (tmp_path / "run").exists()
    assert run(job, args, capsys, check=True)["changed"] is True  # a dry run starts no probe
    args["spec_data"]["allow_shared_network"] = True
    assert run(job, args, capsys)["changed"] is True
    assert jobspec.load_spec(str(tmp_path / "etc/t.json"))["allow_shared_network"] is True


def test_started_stopped_and_finalized(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run(job, render_args(tmp_path, ["/bin/sh", "-c", "echo up; sleep 30"]), capsys)
    spec = str(tmp_path / "etc/t.json")
    assert run(job, {"spec": spec, "state": "started"}, capsys, check=True)["changed"] is True
    assert not (tmp_path / "run/t/state.json").exists()
    started = run(job, {"spec": spec, "state": "started"}, capsys)
    try:
        assert started["changed"] is True and started["state"] == jobspec.RUNNING
        assert run(job, {"spec": spec, "state": "started"}, capsys)["changed"] is False
        info = run(job_info, {"spec": spec, "lines": 5}, capsys)
        assert info["changed"] is False and info["status"]["state"] == jobspec.RUNNING
    finally:
        stopped = run(job, {"spec": spec, "state": "stopped"}, capsys)
    assert stopped["changed"] is True and stopped["state"] == jobspec.STOPPED
    assert run(job, {"spec": spec, "state": "stopped"}, capsys)["changed"] is False
    missing = run(job, {"spec": str(tmp_path / "none.json"), "state": "stopped"}, capsys)
    assert missing["changed"] is False and "never rendered here" in missing["msg"]
    finalized = run(job, {"spec": spec, "state": "finalized"}, capsys)
    assert finalized == {"changed": True, "files": 0, "invocation": finalized["invocation"]}
    assert files.verify_dir(tmp_path / "model") == 0  # a script that wrote nothing: an empty manifest, then DONE
    assert run(job, {"spec": spec, "state": "finalized"}, capsys)["changed"] is False


def test_job_info_names_a_missing_spec(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = run(job_info, {"spec": str(tmp_path / "x.json")}, capsys)
    assert out["failed"] and "x.json is missing or not a JSON object. Fix: render the job" in out["msg"]


# --- the task's log (issue 18): 0640, root and the job's group, never through a symlink ------------------------------
def test_rendered_creates_the_process_backends_log_0640_and_the_supervisor_keeps_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log, args = tmp_path / "log/t.log", render_args(tmp_path, ["/bin/sh", "-c", "echo up"])
    assert str(log) in run(job, args, capsys, check=True)["written"]
    assert not log.exists()
    run(job, args, capsys)
    assert stat.S_IMODE(log.stat().st_mode) == 0o640 and log.read_text() == ""
    assert run(job, args, capsys)["changed"] is False
    spec = str(tmp_path / "etc/t.json")
    run(job, {"spec": spec, "state": "started"}, capsys)
    for _ in range(100):
        if "up" in log.read_text():
            break
        time.sleep(0.05)
    assert "up" in log.read_text() and stat.S_IMODE(log.stat().st_mode) == 0o640


def test_rendered_fixes_an_existing_logs_mode_keeping_its_lines(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "log/t.log"
    log.parent.mkdir()
    log.write_text("earlier run\n")
    log.chmod(0o644)
    assert run(job, render_args(tmp_path, ["/bin/true"]), capsys)["written"][-1] == str(log)
    assert stat.S_IMODE(log.stat().st_mode) == 0o640 and log.read_text() == "earlier run\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="setting another group needs root")
def test_rendered_gives_the_log_the_jobs_group(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    group = grp.getgrnam("nogroup")
    run(job, render_args(tmp_path, ["/bin/true"], group=group.gr_name), capsys)
    info = (tmp_path / "log/t.log").stat()
    assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (0, group.gr_gid, 0o640)


@pytest.mark.skipif(os.geteuid() != 0, reason="the job's group is looked up only as root")
def test_a_dry_run_on_a_fresh_host_without_the_jobs_group_says_what_it_would_do(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """molecule's check: the trainer role would create the group first; the dry run must not fail on its absence."""
    out = run(job, render_args(tmp_path, ["/bin/true"], group="tfcluster-nosuchgroup"), capsys, check=True)
    assert out["changed"] and not (tmp_path / "log/t.log").exists()
    numeric = run(job, render_args(tmp_path, ["/bin/true"], group=str(os.getgid())), capsys)  # a gid, as molecule
    assert numeric["changed"] and (tmp_path / "log/t.log").stat().st_gid == os.getgid()


def test_rendered_refuses_a_symlinked_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    victim = tmp_path / "victim"
    victim.write_text("root's\n")
    victim.chmod(0o600)
    (tmp_path / "log").mkdir()
    (tmp_path / "log/t.log").symlink_to(victim)
    out = run(job, render_args(tmp_path, ["/bin/true"]), capsys)
    assert out["failed"] and f"{tmp_path}/log/t.log (the job's log) is not a regular file" in out["msg"]
    assert stat.S_IMODE(victim.stat().st_mode) == 0o600 and victim.read_text() == "root's\n"


def test_rendered_for_systemd_leaves_the_log_to_the_journal(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    run(job, render_args(tmp_path, ["/bin/true"], unit="[Service]\n", unit_path=str(tmp_path / "t.service")), capsys)
    assert not (tmp_path / "log/t.log").exists()


# --- job_preflight --------------------------------------------------------------------------------------------------
def fake_python(tmp: Path, gpus: int) -> str:
    """An interpreter stand-in: imports anything, lists ``gpus`` GPUs (no TensorFlow needed)."""
    path = tmp / "venv/bin/python"
    path.parent.mkdir(parents=True)
    path.write_text(f"#!/bin/sh\necho '{{\"gpus\": {gpus}}}'\necho started >> {tmp}/runs\n")
    path.chmod(0o755)
    return str(path)


def preflight_args(tmp: Path, **more: Any) -> dict[str, Any]:
    return {"job": {"model_dir": str(tmp / "model"), "run_dir": str(tmp / "run"), "log": str(tmp / "t.log"),
                    "unit": ""}, "stamp_dir": str(tmp / "stamps"), **more}


def test_preflight_passes_and_reports_facts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    release = tmp_path / "release"
    (release / "trainer").mkdir(parents=True)
    (release / "trainer/a.py").write_text("x = 1\n")
    out = run(job_preflight, preflight_args(tmp_path, address="127.0.0.1:1", release_dir=str(release),
                                            python=sys.executable, imports=["json"]), capsys)
    assert out.get("failed") is not True, out
    assert out["problems"] == [] and out["state"] == jobspec.INACTIVE and out["done"] is False
    assert out["digest"] == files.tree_digest(release) and out["remembered"] == []
    assert isinstance(out["systemd"], bool) and "default_interface" in out
    assert run(job_preflight, preflight_args(tmp_path, python=sys.executable, imports=["json"]),
               capsys)["remembered"] == ["imports"]


def test_preflight_on_ipv6_sees_the_busy_port(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The bug: the port check got '[addr]' and answered 'Name or service not known' for every IPv6 host."""
    try:
        sock = socket.socket(socket.AF_INET6)
        sock.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback here")
    sock.listen()
    port = sock.getsockname()[1]
    try:
        out = run(job_preflight, preflight_args(tmp_path, address=f"[::1]:{port}"), capsys)
    finally:
        sock.close()
    assert out["failed"] and out["problems"][0].startswith(f"port [::1]:{port} is not free (")
    assert "Name or service not known" not in out["msg"]
    assert run(job_preflight, preflight_args(tmp_path, address=f"[::1]:{port}"), capsys)["problems"] == []


def test_preflight_lists_every_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "mnist.npz"
    data.write_bytes(b"x")
    args = preflight_args(tmp_path, python=sys.executable, imports=["no_such_module_tfcluster"],
                          release_dir=str(tmp_path / "none"), files={str(data): "0" * 64},
                          gpus=2, sandbox={})
    args["python"] = fake_python(tmp_path, gpus=0)
    out = run(job_preflight, args, capsys)
    assert out["failed"] and len(out["problems"]) == 3, out["problems"]  # the fake python imports anything
    assert "the trainer release" in out["problems"][0] and "is corrupt" in out["problems"][1]
    assert "TensorFlow sees 0 GPU(s) as the job's user in its sandbox, 2 declared" in out["problems"][2]
    assert out["gpus_seen"] == 0
    assert [p.name.split("-")[0] for p in (tmp_path / "stamps").iterdir()] == ["imports"]  # a failed check: none


def test_preflight_remembers_a_passed_gpu_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = preflight_args(tmp_path, gpus=1, python=fake_python(tmp_path, gpus=1))
    assert run(job_preflight, args, capsys)["gpus_seen"] == 1
    again = run(job_preflight, args, capsys)
    assert again["remembered"] == ["gpus"] and (tmp_path / "runs").read_text().count("started") == 1


def test_preflight_in_check_mode_on_a_fresh_host(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = preflight_args(tmp_path, python=str(tmp_path / "venv/bin/python"), imports=["tensorflow"],
                          release_dir=str(tmp_path / "release"), files={str(tmp_path / "data"): ""}, gpus=1)
    out = run(job_preflight, args, capsys, check=True)
    assert out["problems"] == [] and out["digest"] is None and not (tmp_path / "stamps").exists()
    assert run(job_preflight, args, capsys)["failed"]  # for real, the same host is not ready


def test_preflight_skips_the_port_of_a_running_task(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A running task holds its own port: a re-run adopts it instead of failing on the port."""
    run(job, render_args(tmp_path, ["/bin/sh", "-c", "sleep 30"]), capsys)
    spec = str(tmp_path / "etc/t.json")
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    address = f"127.0.0.1:{sock.getsockname()[1]}"
    args = {"job": {"model_dir": str(tmp_path / "model"), "run_dir": str(tmp_path / "run/t"),
                    "log": str(tmp_path / "log/t.log"), "unit": ""}, "address": address}
    try:
        assert run(job_preflight, args, capsys)["failed"]
        run(job, {"spec": spec, "state": "started"}, capsys)
        out = run(job_preflight, args, capsys)
        assert out["state"] == jobspec.RUNNING and out["problems"] == []
    finally:
        run(job, {"spec": spec, "state": "stopped"}, capsys)
        sock.close()
