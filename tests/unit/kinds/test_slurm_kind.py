"""CLUSTER=slurm on the control machine: the cluster file's checks, the batch script, `make plan`, the login node's
answers (preflight, poll) read as data, and the watch loop's pending/settling/decision rounds."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tfcluster import kinds
from tfcluster.core import files
from tfcluster.kinds import slurm_file, slurm_login
from tfcluster.kinds.base import JobRequest
from tfcluster.kinds.slurm_file import ClusterFileError, Layout, Submission, parse_cluster_file, render_sbatch
from tfcluster.run import scheduled, wait

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOSGwsHaYhjV8pa+xHtDvrflCpNy+slc8zLwljEqxl7x"
BASE: dict[str, Any] = {"login": {"host": "10.0.0.5", "user": "alice", "host_keys": [KEY]}, "partition": "gpu",
                        "nodes": 3, "tasks_per_node": 1, "shared_dir": "/shared/tf", "python": {"venv": "/shared/v"}}


def parsed(**change: Any) -> slurm_file.ClusterFile:
    return parse_cluster_file({**BASE, **change}, Path("/etc/slurm.yml"))


def problems(**change: Any) -> list[str]:
    with pytest.raises(ClusterFileError) as caught:
        parsed(**change)
    return [str(p) for p in caught.value.problems]


def test_a_valid_file_takes_its_defaults() -> None:
    cf = parsed()
    assert cf.tasks == {"chief": 1, "worker": 2} and cf.port == 2222 and cf.grace == 120
    assert cf.login.port == 22 and cf.login.python == "python3" and cf.gpus_per_task == 0
    assert parsed(nodes=1).tasks == {"worker": 1}


@pytest.mark.parametrize(("change", "wrong"), [
    ({"login": None}, "/etc/slurm.yml: login: is missing or not a mapping"),
    ({"login": {"host": "a b", "user": "alice"}}, "login.host: address 'a b' is not an IP address or DNS name"),
    ({"login": {"host": "h", "user": "Alice"}}, "login.user: 'Alice' is not a valid user name"),
    ({"login": {"host": "h", "user": "a", "port": 0}}, "login.port: port 0 is not a whole number in 1..65535"),
    ({"login": {"host": "h", "user": "a", "host_keys": ["ssh-rsa nope"]}}, "login.host_keys[0]"),
    ({"login": {"host": "h", "user": "a", "identity_file": "/no/such/key"}}, "login.identity_file: /no/such/key"),
    ({"login": {"host": "h", "user": "a", "shell": "zsh"}}, "login.shell: is not a login field"),
    ({"partition": None}, "partition: is missing"),
    ({"partition": "gpu; rm -rf /"}, "partition: 'gpu; rm -rf /' is not a Slurm name"),
    ({"account": "a b"}, "account: 'a b' is not a Slurm name"),
    ({"nodes": 0}, "nodes: 0 is not a whole number in 1..4096"),
    ({"nodes": "3"}, "nodes: '3' is not a whole number"),
    ({"tasks_per_node": 2, "gpus_per_node": 3}, "gpus_per_node: 3 GPUs do not split evenly over 2 tasks"),
    ({"shared_dir": "relative/dir"}, "shared_dir: 'relative/dir' is not an absolute path"),
    ({"shared_dir": "/shared/../etc"}, "shared_dir: '/shared/../etc' is not an absolute path"),
    ({"shared_dir": "/shared/a b"}, "shared_dir: '/shared/a b' is not an absolute path"),
    ({"python": {}}, "python: is missing, or does not give exactly one of venv, module, build"),
    ({"python": {"venv": "/v", "module": "tf"}}, "does not give exactly one of"),
    ({"python": {"build": "rocm"}}, "python.build: 'rocm' is not one of cpu, gpu"),
    ({"python": {"module": "tf; id"}}, "python.module: 'tf; id' is not a module name"),
    ({"tasks": {"worker": 2}}, "tasks: declares 2 task(s) but the allocation runs 3"),
    ({"tasks": {"boss": 3}}, "tasks.boss: is not a task type"),
    ({"tasks": {"ps": 1, "worker": 2}}, "parameter_server needs exactly one chief"),
    ({"cluster_name": "Bad_Name"}, "cluster_name: 'Bad_Name' is not a valid cluster name"),
    ({"queue": "x"}, "/etc/slurm.yml: queue: is not a cluster file field"),
    ({"port": 70000}, "port: 70000 is not a whole number in 1..65534"),
])
def test_every_bad_field_is_named_with_a_fix(change: dict[str, Any], wrong: str) -> None:
    found = problems(**change)
    assert any(wrong in text for text in found), found
    assert all(". Fix: " in text and text.startswith("/etc/slurm.yml") for text in found)


def test_every_problem_is_reported_at_once() -> None:
    assert len(problems(partition=None, nodes=0, shared_dir="x")) == 3


def test_a_missing_or_broken_file_names_slurm(tmp_path: Path) -> None:
    with pytest.raises(ClusterFileError, match="SLURM: is not set"):
        slurm_file.load_cluster_file(None)
    (tmp_path / "c.yml").write_text("login: [\n")
    with pytest.raises(ClusterFileError, match=r"SLURM: .*c\.yml is not valid YAML/JSON at line"):
        slurm_file.load_cluster_file(tmp_path / "c.yml")


def submission(cf: slurm_file.ClusterFile, **extra: Any) -> Submission:
    layout = Layout(cf.shared_dir, "hpc", "mnist")
    spec = slurm_file.job_spec(cf, job="mnist", layout=layout, release="r" * 64, datasets="", strategy="auto",
                               program={"args": []}, legacy_keras=True, max_duration=extra.get("max_duration"))
    return Submission(cluster=cf, cluster_name="hpc", job="mnist", release="r" * 64, spec=spec, **extra)


def test_the_batch_script_asks_for_the_allocation_and_one_fail_fast_step() -> None:
    cf = parsed(account="proj", qos="normal", gpus_per_node=8, tasks_per_node=2, nodes=2, cpus_per_task=4,
                tasks={"worker": 4})
    text = render_sbatch(submission(cf, max_duration=3 * 3600 + 1))
    for line in ("#SBATCH --job-name=tfcluster-hpc-mnist", "#SBATCH --partition=gpu", "#SBATCH --account=proj",
                 "#SBATCH --qos=normal", "#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=2",
                 "#SBATCH --cpus-per-task=4", "#SBATCH --gpus-per-node=8", "#SBATCH --time=0-03:01:00",
                 "#SBATCH --signal=TERM@120", "#SBATCH --requeue",
                 "#SBATCH --output=/shared/tf/jobs/hpc/mnist/logs/batch.out",
                 f"#SBATCH --chdir=/shared/tf/releases/{'r' * 64}"):  # never the job dir: first on sys.path
        assert line in text.splitlines(), line
    step = text.splitlines()[-1]
    assert step.startswith("exec srun --kill-on-bad-exit=1 --distribution=block --nodes=2 --ntasks-per-node=2 "
                           "--gpus-per-task=4 /shared/v/bin/python -m tfcluster.host.slurm_task run ")
    assert "CUDA_VISIBLE_DEVICES" not in text


def test_a_cpu_job_without_a_deadline_asks_for_no_gpus_and_no_time() -> None:
    text = render_sbatch(submission(parsed(python={"module": "tensorflow/2.21"})))
    assert "--gpus" not in text and "--time" not in text and "--account" not in text
    assert "module load tensorflow/2.21" in text and " python3 -m tfcluster.host.slurm_task run " in text


def test_the_spec_picks_the_collective_by_gpus() -> None:
    cf = parsed()
    assert submission(cf).spec["collective"] == "ring"
    assert submission(parsed(gpus_per_node=2)).spec["collective"] == "nccl"
    assert submission(parsed(tasks={"chief": 1, "ps": 1, "worker": 1}, gpus_per_node=2)).spec["collective"] == \
        "ring"


def write(tmp_path: Path, **change: Any) -> Path:
    path = tmp_path / "slurm.yml"
    path.write_text(json.dumps({**BASE, **change}))
    return path.with_suffix(".yml")


def test_plan_shows_the_script_and_every_tf_config_in_slurms_order(tmp_path: Path) -> None:
    path = tmp_path / "slurm.json"
    path.write_text(json.dumps({**BASE, "nodes": 12}))
    target = kinds.Target(kind="slurm", name="tfcluster-slurm", cluster_file=path, job="j1")
    code, lines = kinds.get("slurm").plan_lines(target, {}, None)
    assert code == 0
    assert "  #SBATCH --nodes=12" in lines and any("--job-name=tfcluster-tfcluster-slurm-j1" in x for x in lines)
    tasks = [line.split() for line in lines if line.startswith("  task ")]
    assert [t[2] for t in tasks] == [f"node{i}" for i in range(1, 13)]  # node9 before node10: never sorted
    nine = next(t for t in tasks if t[2] == "node9")
    assert nine[3] == "worker-7" and '"worker-7"' not in nine[4] and json.loads(nine[4].split("=", 1)[1])["task"] == \
        {"index": 7, "type": "worker"}


def test_plan_of_a_bad_file_exits_2_with_its_problems(tmp_path: Path) -> None:
    path = tmp_path / "slurm.json"
    path.write_text(json.dumps({**BASE, "nodes": 0}))
    code, lines = kinds.get("slurm").plan_lines(kinds.Target(kind="slurm", name="x", cluster_file=path), {}, None)
    assert code == 2 and any("nodes: 0 is not a whole number" in line for line in lines)


def test_the_other_kinds_have_no_transport() -> None:
    for name in ("local", "aws", "onprem"):
        assert kinds.get(name).transport(kinds.Target(kind=name, name="x")) is None
        assert kinds.get(name).cluster_file_setting is None


def test_the_settings_read_slurm_and_report_the_files_problems(tmp_path: Path) -> None:
    from tfcluster.cli import settings

    with pytest.raises(settings.SettingsError, match="SLURM: is not set"):
        settings.load({"CLUSTER": "slurm"})
    path = tmp_path / "slurm.json"
    path.write_text(json.dumps({**BASE, "partition": "a b"}))
    with pytest.raises(settings.SettingsError, match="partition: 'a b' is not a Slurm name"):
        settings.load({"CLUSTER": "slurm", "SLURM": str(path)})
    path.write_text(json.dumps(BASE))
    loaded = settings.load({"CLUSTER": "slurm", "SLURM": str(path), "JOB": "j2"})
    assert loaded.target.cluster_file == path and loaded.target.job == "j2"


# --- the login node's answers ---------------------------------------------------------------------------------------
def answer(**parts: list[str]) -> dict[str, list[str]]:
    found = {"rc": ["0"], "partition": ["PartitionName=gpu TotalNodes=3 State=UP"], "partitions": ["gpu*", "cpu"],
             "nodes": ["3|8|gpu:4"], "active": [], "shared": ["ok"], "python": ["ok"], "tool": ["ok"],
             "submitted": [], "uid": ["1000"], "dirs": ["self 1000 700 /shared/tf", "parent 0 755 /shared"],
             "foreign": [], "end": []}
    return {**found, **parts}


@pytest.mark.parametrize(("cf_change", "found", "wrong"), [
    ({"partition": "nope"}, {"rc": ["1"], "partition": ["Partition nope not found"]},
     "partition: 'nope' is not a partition of this cluster. Fix: use one of cpu, gpu"),
    ({"nodes": 4, "tasks": {"worker": 4}}, {}, "nodes: 4 nodes asked, partition gpu has 3"),
    ({"tasks_per_node": 3, "cpus_per_task": 4, "tasks": {"worker": 9}}, {}, "3 task(s) x 4 CPU(s) do not fit"),
    ({"gpus_per_node": 8}, {}, "gpus_per_node: 8 GPUs asked, the nodes of gpu have 4"),
    ({}, {"shared": ["missing"]}, "shared_dir: /shared/tf is not a writable directory"),
    ({}, {"python": ["missing"]}, "python.venv: /shared/v/bin/python does not exist"),
    ({}, {"tool": ["old"]}, "login.python: python3 on the login node is not a Python >= 3.8"),
])
def test_the_preflight_refuses_what_the_cluster_cannot_run(cf_change: dict[str, Any], found: dict[str, list[str]],
                                                           wrong: str) -> None:
    texts = [str(p) for p in slurm_login.preflight_problems(parsed(**cf_change), answer(**found))]
    assert any(wrong in text for text in texts), texts


def test_a_fitting_allocation_passes_the_preflight() -> None:
    assert slurm_login.preflight_problems(parsed(gpus_per_node=4), answer()) == []


def test_the_preflight_sections_are_split() -> None:
    text = "@@partition\nPartitionName=x\n@@rc 0\n@@shared\nok\n@@end\n"
    assert slurm_login.sections(text) == {"partition": ["PartitionName=x"], "rc": ["0"], "shared": ["ok"], "end": []}


@pytest.mark.parametrize(("gres", "count"), [("gpu:4", 4), ("gpu:a100:8(S:0-1)", 8), ("(null)", 0),
                                             ("gpu:a100:2,gpu:v100:2", 4), ("mps:100", 0)])
def test_gpus_per_node_from_sinfo(gres: str, count: int) -> None:
    assert slurm_login._gpus(gres) == count


def test_the_record_round_trips_and_refuses_junk() -> None:
    record = slurm_login.Record(job_id="42", spec="/s/spec.json", release="/s/r", chief_slot="chief-0")
    assert slurm_login.Record.from_json(record.to_json()) == record
    for text in ("", "[]", '{"job_id": "4; rm"}', '{"job_id": 12.5}', "not json"):
        assert slurm_login.Record.from_json(text) is None


def test_names_in_the_view_are_nodes_when_each_runs_one_task() -> None:
    assert slurm_login.key_of("node10", 0, "worker-0", True) == "node10"
    assert slurm_login.key_of("node10", 1, "worker-1", False) == "node10:1"
    assert slurm_login.key_of(None, None, "chief-0", True) == "chief-0"
    assert slurm_login.key_of("bad\x1bname", 0, "chief-0", True) == "chief-0"  # host text: never a key as it is


def test_the_program_and_its_datasets() -> None:
    trainer = JobRequest(job="j", strategy="parameter_server", epochs=3, trainer_args=("--batch-size", "8"))
    assert slurm_login.program_of(trainer) == {"args": ["--strategy", "parameter_server", "--epochs", "3",
                                                        "--batch-size", "8"]}
    assert slurm_login.default_datasets(trainer) == ("mnist",)
    assert slurm_login.default_datasets(JobRequest(job="j", trainer_args=("--dataset", "synthetic"))) == ()
    script = JobRequest(job="j", script=Path("/x/train.py"), script_args=("--lr", "1"))
    assert slurm_login.program_of(script) == {"script": "train.py", "args": ["--lr", "1"]}
    assert slurm_login.program_of(JobRequest(job="j", script=Path("/x/pkg"))) == {"package": "pkg", "args": []}
    assert slurm_login.default_datasets(script) == ()
    assert slurm_login.default_datasets(JobRequest(job="j", script=Path("/x/t.py"), datasets=("mnist",))) == \
        ("mnist",)


def test_the_datasets_digest_is_the_tree_digest_of_their_directory(tmp_path: Path) -> None:
    (tmp_path / "a.npz").write_bytes(b"one")
    (tmp_path / "b.npz").write_bytes(b"two")
    digests = {name: files.sha256_file(tmp_path / name) for name in ("a.npz", "b.npz")}
    assert slurm_login.tree_digest_of(digests) == files.tree_digest(tmp_path)


def test_an_answer_is_read_bounded() -> None:
    big = slurm_login.run_bounded([sys.executable, "-c", "print('x' * 100000)"], timeout=30, limit=1000)
    assert big.code == 0 and big.over and len(big.out) == 1000
    slow = slurm_login.run_bounded([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.5)
    assert slow.code == 124


class FakeTransport(slurm_login.SlurmTransport):
    def __init__(self, answers: list[Any]) -> None:
        super().__init__(parsed(), "hpc", kinds.Target(kind="slurm", name="hpc", job="mnist"))
        self.answers = answers

    def ssh(self, words: Any, **kwargs: Any) -> slurm_login.Answer:
        item = self.answers.pop(0)
        if isinstance(item, Exception):
            raise item
        return item


RECORD = slurm_login.Record(job_id="7", spec="/shared/tf/jobs/hpc/mnist/spec-x.json", release="/r",
                            chief_slot="chief-0")


def status(state: str, node: str, **more: Any) -> dict[str, Any]:
    return {"state": state, "node": node, "local_id": 0, "now": 1.0, "restarts": 0, **more}


def test_a_poll_names_each_task_by_its_node() -> None:
    doc = {"scheduler": {"phase": "running", "state": "RUNNING"},
           "tasks": {"chief-0": status("running", "node9"), "worker-0": status("running", "node10"),
                     "worker-1": status("running", "node11")}}
    transport = FakeTransport([slurm_login.Answer(0, json.dumps(doc) + "\n", "")])
    scheduler, polls, slots = transport.poll(RECORD)
    assert scheduler["phase"] == "running" and list(polls) == ["node9", "node10", "node11"]
    assert slots == {"node9": "chief-0", "node10": "worker-0", "node11": "worker-1"}


@pytest.mark.parametrize("out", ["", "not json", "[1, 2]", '{"scheduler": 1, "tasks": {}}', "\x1b[2J{}"])
def test_a_poll_of_the_wrong_shape_makes_every_task_unreadable(out: str) -> None:
    _scheduler, polls, _slots = FakeTransport([slurm_login.Answer(0, out, "")]).poll(RECORD)
    assert list(polls) == ["chief-0", "worker-0", "worker-1"]
    assert all("not a job status" in p["error"] and "unreachable" not in p for p in polls.values())
    decided = wait.decide(polls, {k: k for k in polls}, {}, now=1.0, started=0.0, settings=wait.Settings("chief-0"))
    assert decided["decision"] == "failed" and decided["culprit"] == "chief-0"


def test_an_unreachable_login_node_is_an_unreachable_poll() -> None:
    error = slurm_login.LoginError([slurm_login.Problem("login.host", "cannot reach", "check it")])
    _scheduler, polls, _slots = FakeTransport([error]).poll(RECORD)
    assert all(p["unreachable"] is True for p in polls.values())


def test_a_login_error_escapes_the_login_nodes_text() -> None:
    error = slurm_login.LoginError([slurm_login.Problem("f", "said \x1b]52;c;x\x07", "fix")])
    assert "\x1b" not in str(error) and "\\x1b" in str(error)


# --- the watch loop -------------------------------------------------------------------------------------------------
class View:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def handle(self, event: dict[str, Any]) -> None:
        self.events.append(event)


def rounds(*items: Any) -> Any:
    queue = list(items)
    return lambda: queue.pop(0)


def task_polls(state: str, **more: Any) -> tuple[dict[str, Any], dict[str, str]]:
    polls = {"node9": {"status": {"state": state, "done": state == "succeeded", "now": 1.0, **more}},
             "node10": {"status": {"state": state, "now": 1.0, **more}}}
    return polls, {"node9": "chief-0", "node10": "worker-0"}


def test_a_pending_job_is_pending_with_its_reason_then_watched_to_done() -> None:
    pending = ({"phase": "pending", "state": "PENDING", "reason": "Resources"}, {}, {"chief-0": "chief-0",
                                                                                      "worker-0": "worker-0"})
    settling = ({"phase": "settling", "state": "COMPLETING"}, *task_polls("stopped"))
    running = ({"phase": "running", "state": "RUNNING"}, *task_polls("running"))
    done = ({"phase": "ended", "state": "COMPLETED"}, *task_polls("succeeded"))
    view, clock = View(), iter(range(100))
    result = scheduled.watch(rounds(pending, pending, settling, running, done), view, wait.Settings(chief="x"),
                             chief_slot="chief-0", clock=lambda: float(next(clock)), sleep=lambda s: None)
    assert result["decision"] == "done" and result["pending_seconds"] == 6.0
    shown = [t["state"] for e in view.events if e["event"] == "progress" for t in e["tasks"]]
    assert shown[:2] == ["pending (Resources)", "pending (Resources)"]


def test_a_requeued_job_shows_its_restarts_and_the_failed_node_is_the_culprit() -> None:
    line = scheduled.scheduler_line({"phase": "pending", "state": "PENDING", "reason": "BeginTime", "restarts": 1})
    assert line == "requeued 1x, pending (BeginTime)"
    polls, slots = task_polls("running")
    polls["node10"] = {"status": {"state": "failed", "exit_code": 137, "now": 1.0}}
    result = scheduled.watch(rounds(({"phase": "running"}, polls, slots)), View(), wait.Settings(chief="x"),
                             chief_slot="chief-0", sleep=lambda s: None)
    assert result["decision"] == "failed" and result["culprit"] == "node10" and "node10" in result["message"]
    assert scheduled.decision_event(result)["culprit"] == "node10"


def test_the_scheduler_line_escapes_its_text() -> None:
    line = scheduled.scheduler_line({"phase": "pending", "reason": "a\x1b[31mb", "state": "PENDING"})
    assert "\x1b" not in line and "\\x1b" in line


def test_the_task_that_failed_first_is_the_culprit_not_its_peers() -> None:
    polls = {"node9": {"status": {"state": "failed", "exit_code": 1, "ended_at": 10.02, "now": 11.0}},
             "node10": {"status": {"state": "failed", "exit_code": 137, "ended_at": 10.0, "now": 11.0}},
             "node11": {"status": {"state": "running", "now": 11.0}}}
    ordered = slurm_login.first_failure_first(polls)
    assert list(ordered) == ["node10", "node9", "node11"]
    slots = {"node9": "chief-0", "node10": "worker-0", "node11": "worker-1"}
    assert wait.decide(ordered, slots, {}, now=11.0, started=0.0, settings=wait.Settings("node9"))["culprit"] == \
        "node10"
    calm = {"node9": {"status": {"state": "running"}}, "node10": {"error": "x"}}
    assert list(slurm_login.first_failure_first(calm)) == ["node9", "node10"]


def test_the_example_cluster_file_is_valid() -> None:
    cf = slurm_file.load_cluster_file(Path(__file__).resolve().parents[3] / "examples" / "slurm.example.yml")
    assert cf.tasks == {"chief": 1, "worker": 3} and cf.gpus_per_task == 8 and cf.login.host_keys
