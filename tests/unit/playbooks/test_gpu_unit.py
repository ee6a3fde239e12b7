"""The job unit's sandbox by kind is docs/jobs.md's table "What CUDA needs": this test reads the table, renders the
tf_job role's vars and its unit template with Ansible's own templating for a CPU host, a GPU host, a GPU host with
EFA and a CPU host where EFA is present, and fails on any difference. It also checks what goes with the table: the
GPU unit orders itself after the nvidia-uvm oneshot and has no in-unit nvidia-modprobe, the unit can write the job's
home, and the env file points HOME and the caches into it (and, with EFA, the libraries)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.unit.playbooks.test_pip_argv import ROLES, render

REPO = Path(__file__).resolve().parents[3]
DOCS = REPO / "docs" / "jobs.md"
TEMPLATE = ROLES / "tf_job" / "templates" / "job.service.j2"
HOME = "/var/lib/tfcluster/jobs/j1/home"
PLUGIN = "/opt/amazon/ofi-nccl/lib"


def table() -> dict[str, set[str]]:
    """{column: the properties the table marks yes} from the rows between the gpu-unit-table markers."""
    text = DOCS.read_text(encoding="utf-8")
    block = text.split("<!-- gpu-unit-table -->", 1)[1].split("<!-- /gpu-unit-table -->", 1)[0]
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in block.strip().splitlines()]
    header, body = rows[0], [r for r in rows[2:] if r and r[0].startswith("`")]
    columns: dict[str, set[str]] = {name: set() for name in header[1:4]}
    for row in body:
        prop = row[0].strip("`")
        assert row[5], f"docs/jobs.md: the row {prop} names no source"
        for name, cell in zip(header[1:4], row[1:4], strict=True):
            if cell == "yes":
                columns[name].add(prop)
    return columns


def host_vars(gpus: int, efa: bool) -> dict[str, Any]:
    return {"inventory_hostname": "h1", "groups": {"tfcluster": ["h1"]},
            "hostvars": {"h1": {"tfcluster_gpus": gpus}}, "tfcluster_task_type": "worker",
            "tfcluster_task_index": 0, "tfcluster_address": "10.0.0.1:2222", "tfcluster_gpus": gpus,
            "tfcluster_job": "j1", "playbook_dir": str(REPO / "playbooks"),
            "_tf_job_preflight": {"systemd": True, "default_interface": "ens5",
                                  "efa": {"enabled": efa, "devices": ["/dev/infiniband/uverbs0"] if efa else [],
                                          "plugin_dir": PLUGIN if efa else ""}}}


KINDS = {  # kind -> (gpus, EFA found by the preflight, the table's column)
    "cpu": (0, False, "CPU"),
    "gpu": (2, False, "GPU"),
    "gpu+efa": (2, True, "GPU+EFA"),
    "cpu where EFA is present": (0, True, "CPU"),
}
EXPRESSIONS = ["{{ _tf_job_sandbox }}", "{{ _tf_job_sandbox_base }}", "{{ _tf_job_env }}",
               "{{ _tf_job_spec.base_env }}", "{{ lookup('ansible.builtin.template', '" + str(TEMPLATE) + "') }}"]


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[Any]]:
    return {kind: render("tf_job", EXPRESSIONS, host_vars(gpus, efa)) for kind, (gpus, efa, _) in KINDS.items()}


def test_the_table_has_every_kind_and_a_source_for_each_row() -> None:
    columns = table()
    assert set(columns) == {"CPU", "GPU", "GPU+EFA"}
    assert columns["GPU"] <= columns["GPU+EFA"] and columns["CPU"].isdisjoint(columns["GPU"])


@pytest.mark.parametrize("kind", list(KINDS))
def test_the_units_kind_specific_sandbox_is_the_docs_table(kind: str, rendered: dict[str, list[Any]]) -> None:
    sandbox, base, _env, _base_env, unit = rendered[kind]
    want = table()[KINDS[kind][2]]
    assert set(sandbox) - set(base) == want, kind
    assert len(sandbox) == len(set(sandbox)), "a property twice"
    for prop in want:  # and the unit file has each as a line of its own
        assert re.search(rf"^{re.escape(prop)}$", unit, re.M), (kind, prop)


@pytest.mark.parametrize("kind", list(KINDS))
def test_the_gpu_unit_waits_for_the_uvm_oneshot_and_never_mknods(kind: str, rendered: dict[str, list[Any]]) -> None:
    unit = rendered[kind][4]
    gpus = KINDS[kind][0] > 0
    after = re.search(r"^After=(.*)$", unit, re.M)
    wants = re.search(r"^Wants=(.*)$", unit, re.M)
    assert after and wants
    assert ("tfcluster.nvidia-uvm.service" in after.group(1).split()) == gpus
    assert ("tfcluster.nvidia-uvm.service" in wants.group(1).split()) == gpus
    assert "nvidia-modprobe" not in unit and "ProcSubset=pid" not in unit if gpus else "ProcSubset=pid" in unit
    writable = re.search(r"^ReadWritePaths=(.*)$", unit, re.M)
    assert writable and HOME in writable.group(1).split(), unit


@pytest.mark.parametrize("kind", list(KINDS))
def test_the_env_points_home_and_every_cache_into_the_jobs_home(kind: str, rendered: dict[str, list[Any]]) -> None:
    from tfcluster.core.contract import JOB_HOME_ENV

    env, base_env = rendered[kind][2], rendered[kind][3]
    assert {name: env[name] for name in JOB_HOME_ENV} == {
        name: f"{HOME}/{rel}" if rel else HOME for name, rel in JOB_HOME_ENV.items()}
    assert base_env["HOME"] == HOME  # the process backend's child gets it too
    efa = kind == "gpu+efa"
    assert ("FI_PROVIDER" in env) == efa and ("LD_LIBRARY_PATH" in env) == efa
    if efa:
        assert env["FI_PROVIDER"] == "efa" and env["LD_LIBRARY_PATH"] == f"/opt/amazon/efa/lib:{PLUGIN}"


def test_a_local_slot_keeps_your_home_and_gets_no_home_dir() -> None:
    values = render("tf_job", ["{{ _tf_job_home }}", "{{ _tf_job_env }}", "{{ _tf_job_writable }}"],
                    {**host_vars(0, False), "tfcluster_local": True, "tfcluster_prefix": "/tmp/x"})
    assert values[0] == "" and "KERAS_HOME" not in values[1] and values[2] == ["/tmp/x/var/lib/tfcluster/j1"]


def test_the_preflight_gets_the_sandbox_without_efa_and_adds_it_itself() -> None:
    host, efa = render("tf_job", ["{{ _tf_job_sandbox_host }}", "{{ _tf_job_sandbox_efa }}"], host_vars(2, True))
    assert "DeviceAllow=char-infiniband_verbs rw" not in host and "DeviceAllow=char-infiniband_verbs rw" in efa
