"""Cluster kinds: one table routes them, each implements the interface, and nothing else tests a kind's name."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from tfcluster import kinds
from tfcluster.inventory import config as inventory_config
from tfcluster.kinds.base import Kind

REPO = Path(__file__).resolve().parents[3]
NAMES = set(kinds.NAMES)


def test_the_table_routes_every_kind_by_its_name() -> None:
    assert kinds.NAMES == ("local", "aws", "onprem", "slurm")
    for name, kind in kinds.KINDS.items():
        assert kind.name == name and isinstance(kind, Kind) and kinds.get(name) is kind and kind.summary
    with pytest.raises(kinds.KindError, match=r"CLUSTER=gce is not a cluster kind\. Fix: CLUSTER= one of local, aws"):
        kinds.get("gce")


def test_each_kind_says_what_it_provisions_and_what_the_roles_read() -> None:
    local, aws, onprem = (kinds.get(n) for n in ("local", "aws", "onprem"))
    assert (local.backend, aws.backend, onprem.backend) == ("local", "aws", None)
    assert aws.has_instances and not local.has_instances and not onprem.has_instances
    assert onprem.needs_host_file and not aws.needs_host_file
    assert aws.traits.autostop and not onprem.traits.autostop and not local.traits.autostop
    assert onprem.traits.firewall and aws.traits.firewall and not local.traits.firewall
    assert aws.traits.boot_wait == 600 and onprem.traits.boot_wait == 60


@pytest.mark.parametrize("name", ["local", "aws", "onprem"])
def test_the_traits_a_kind_sends_are_what_the_inventory_accepts(name: str) -> None:
    kind = kinds.get(name)
    settings = inventory_config.load_settings({"TFCLUSTER_SOURCE": "local", "TFCLUSTER_KIND": name,
                                               "TFCLUSTER_KIND_TRAITS": kind.traits.to_json()})
    assert settings.kind == name and settings.kind_traits == json.loads(kind.traits.to_json())


@pytest.mark.parametrize(("traits", "message"), [
    ('{"autostop": "yes"}', "autostop must be true or false"),
    ('{"boot_wait": 0}', "boot_wait must be a whole number in 1..86400"),
    ('{"reboot": true}', "is not an object of autostop, firewall, boot_wait"),
    ("[]", "is not an object of"),
])
def test_bad_traits_are_refused_naming_the_variable(traits: str, message: str) -> None:
    with pytest.raises(inventory_config.InventoryError) as caught:
        inventory_config.load_settings({"TFCLUSTER_SOURCE": "local", "TFCLUSTER_KIND_TRAITS": traits})
    assert any(p.field == "TFCLUSTER_KIND_TRAITS" and message in p.message for p in caught.value.problems)


def test_the_inventory_env_names_the_kind_and_its_source(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts.yml"
    hosts.write_text("hosts: []\n")
    onprem = kinds.get("onprem").inventory_env(kinds.Target(kind="onprem", name="lab", hosts_file=hosts), {})
    assert onprem["TFCLUSTER_SOURCE"] == "static" and onprem["TFCLUSTER_HOSTS_FILE"] == str(hosts)
    assert onprem["TFCLUSTER_KIND"] == "onprem" and json.loads(onprem["TFCLUSTER_KIND_TRAITS"])["firewall"] is True
    local = kinds.get("local").inventory_env(kinds.Target(kind="local", name="tfcluster-local", workers=3), {})
    assert local["TFCLUSTER_SOURCE"] == "terraform" and local["TFCLUSTER_TF_DIR"].endswith("infra/local")
    assert local["TFCLUSTER_WORKERS"] == "3" and "TFCLUSTER_KNOWN_HOSTS" not in local


def test_a_kind_without_instances_has_no_ec2_and_nothing_running() -> None:
    onprem = kinds.get("onprem")
    with pytest.raises(kinds.KindError, match="has no cloud instances"):
        onprem.ec2(kinds.Target(kind="onprem", name="lab"))
    assert onprem.still_running(kinds.Target(kind="onprem", name="lab")) == []
    assert onprem.instance_slots(kinds.Target(kind="onprem", name="lab")) == {}


# --- nothing outside tfcluster/kinds/ decides by a kind's name -------------------------------------------------------
def _kind_name_tests(path: Path, root: Path = REPO) -> list[str]:
    """`x == "aws"`, `x != "onprem"`, `x in ("local", ...)` where x names a cluster or a kind."""
    found = []
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        names = [s.value for s in sides if isinstance(s, ast.Constant) and s.value in NAMES]
        names += [e.value for s in sides if isinstance(s, (ast.Tuple, ast.List, ast.Set)) for e in s.elts
                  if isinstance(e, ast.Constant) and e.value in NAMES]
        subject = " ".join(ast.unparse(s) for s in sides if not isinstance(s, ast.Constant)).lower()
        if names and re.search(r"cluster|kind", subject):
            found.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node)}")
    return found


YAML_TEST = re.compile(r"(tfcluster_cluster|tfcluster_kind)\b[^\n]{0,40}(==|!=|\bin\b)[^\n]{0,20}"
                       r"(local|aws|onprem|slurm)")


def test_no_kind_name_is_tested_outside_the_kind_modules() -> None:
    python = [p for p in (REPO / "tfcluster").rglob("*.py") if "kinds" not in p.relative_to(REPO).parts]
    python += list((REPO / "playbooks").rglob("*.py"))
    found = [hit for path in python for hit in _kind_name_tests(path)]
    yaml_files = [*(REPO / "playbooks").rglob("*.yml"), *(REPO / "playbooks").rglob("*.j2")]
    found += [f"{p.relative_to(REPO)}: {m.group(0)}" for p in yaml_files for m in YAML_TEST.finditer(p.read_text())]
    assert len(python) > 50 and yaml_files
    assert not found, "\n".join(found)


def test_the_check_catches_a_planted_kind_test(tmp_path: Path) -> None:
    planted = tmp_path / "x.py"
    planted.write_text('def f(settings):\n    return settings.cluster == "aws" or kind in ("local", "onprem")\n')
    assert _kind_name_tests(planted, tmp_path) == ["x.py:2: settings.cluster == 'aws'",
                                                   "x.py:2: kind in ('local', 'onprem')"]
    assert YAML_TEST.search("when: tfcluster_cluster == 'aws'")


def test_the_local_cluster_is_said_to_run_only_when_its_endpoint_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    from tfcluster.kinds import local

    target = kinds.Target(kind="local", name="tfcluster-local")
    monkeypatch.setattr(local.localaws, "running", lambda state_dir: None)  # never provisioned, or destroyed
    assert kinds.get("local").still_running(target) == []
    monkeypatch.setattr(local.localaws, "running", lambda state_dir: object())
    assert kinds.get("local").still_running(target)[0].startswith("still running: the emulated cluster tfcluster-local")
