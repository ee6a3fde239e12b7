"""Every role states the same min_ansible_version, equal to the collection's requires_ansible; every module of the
deploy area documents itself and supports check mode."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest
import yaml

from tfcluster.core import paths

REPO = Path(__file__).resolve().parents[3]
ROLES = sorted(paths.ROLES.glob("*/meta/main.yml"))
COLLECTION = REPO / "playbooks/collections/ansible_collections/tfcluster/cluster"
ATTRIBUTES = importlib.import_module(
    "ansible_collections.tfcluster.cluster.plugins.doc_fragments.attributes").ModuleDocFragment
MODULES = ("state_probe", "release", "manifest_info", "driver_facts")


def requires_ansible() -> str:
    return str(yaml.safe_load((COLLECTION / "meta/runtime.yml").read_text())["requires_ansible"]).lstrip(">=")


@pytest.mark.parametrize("meta", ROLES, ids=lambda p: p.parent.parent.name)
def test_min_ansible_version_is_the_collections(meta: Path) -> None:
    version = str(yaml.safe_load(meta.read_text())["galaxy_info"]["min_ansible_version"])
    assert version == requires_ansible(), f"{meta}: {version} != meta/runtime.yml requires_ansible"


@pytest.mark.parametrize("name", MODULES)
def test_module_documents_itself_and_supports_check_mode(name: str) -> None:
    source = (COLLECTION / "plugins/modules" / f"{name}.py").read_text()
    tree = ast.parse(source)
    assigned = {t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets
                if isinstance(t, ast.Name)}
    assert {"DOCUMENTATION", "EXAMPLES", "RETURN"} <= assigned
    doc = yaml.safe_load(next(node.value.value for node in tree.body if isinstance(node, ast.Assign)
                              and getattr(node.targets[0], "id", "") == "DOCUMENTATION"))
    fragments = doc.get("extends_documentation_fragment") or []
    assert doc["module"] == name and "tfcluster.cluster.attributes" in fragments
    variant = next(f.rsplit(".", 1)[1] for f in fragments if f.startswith("tfcluster.cluster.attributes."))
    attributes = yaml.safe_load(getattr(ATTRIBUTES, variant.upper()))["attributes"]
    assert attributes["check_mode"]["support"] == "full"  # what the shared fragment says every module supports
    assert "supports_check_mode=True" in source


def test_the_attributes_are_written_once_in_the_doc_fragment() -> None:
    """No module repeats the attributes block: the doc fragment holds it (community.general's shape)."""
    for module in (COLLECTION / "plugins/modules").glob("*.py"):
        assert "\nattributes:" not in module.read_text(), f"{module.name} repeats the attributes block"
    assert {"check_mode", "diff_mode"} <= set(yaml.safe_load(ATTRIBUTES.DOCUMENTATION)["attributes"])
