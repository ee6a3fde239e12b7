"""Static checks of the Terraform sources: every validation is exercised, messages say how to fix, the tag keys are
written in one place, outputs match the contract. Text-level (no terraform needed)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

MODULE = Path(__file__).resolve().parents[3] / "infra" / "modules" / "gpu_cluster"
INFRA = MODULE.parent.parent
TAG_KEYS = ("tfcluster:cluster", "tfcluster:task_type", "tfcluster:task_index")
HOST_FIELDS = ("name", "task_type", "task_index", "instance_id", "private_ip", "public_ip", "instance_type", "port",
               "gpus", "connection", "ssh_user")


def _blocks(text: str, kind: str) -> dict[str, str]:
    """name -> body of top-level `kind "name" { ... }` blocks (brace matching)."""
    out: dict[str, str] = {}
    for match in re.finditer(rf'^{kind} "([^"]+)" \{{', text, re.M):
        depth, i = 1, match.end()
        while depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        out[match.group(1)] = text[match.end():i - 1]
    return out


VARIABLES = _blocks((MODULE / "variables.tf").read_text(), "variable")
TESTS = "\n".join(p.read_text() for p in (MODULE / "tests").glob("*.tftest.hcl"))


def test_every_variable_has_description_and_type() -> None:
    for name, body in VARIABLES.items():
        assert re.search(r"^\s+description\s+=", body, re.M), name
        assert re.search(r"^\s+type\s+=", body, re.M), name


@pytest.mark.parametrize("name", sorted(n for n, b in VARIABLES.items() if "validation {" in b))
def test_every_validated_variable_has_an_expect_failures_run(name: str) -> None:
    assert re.search(rf"expect_failures\s+=\s+\[[^\]]*var\.{name}\b", TESTS), f"no expect_failures run for var.{name}"


@pytest.mark.parametrize("name", sorted(n for n, b in VARIABLES.items() if "validation {" in b))
def test_validation_counts_match_runs(name: str) -> None:
    validations = VARIABLES[name].count("validation {")
    runs = len(re.findall(rf"expect_failures\s+=\s+\[var\.{name}\]", TESTS))
    assert runs >= validations, f"var.{name}: {validations} validation blocks but {runs} failing runs"


def test_error_messages_say_what_to_do() -> None:
    messages = re.findall(r'error_message\s+=\s+"((?:[^"\\]|\\.)*)"', (MODULE / "variables.tf").read_text())
    assert len(messages) >= 25
    for message in messages:
        assert "Fix:" in message or " must " in message, message
        assert message.endswith("."), message


def test_tag_keys_are_written_in_one_place() -> None:
    sources = {p: p.read_text() for p in MODULE.glob("*.tf")}
    for key in TAG_KEYS:
        places = [p.name for p, text in sources.items() if f'"{key}"' in text]
        assert places == ["main.tf"], (key, places)
        assert sources[MODULE / "main.tf"].count(f'"{key}"') == 1, key
        assert key in (MODULE / "README.md").read_text(), f"{key} not named in the module README"


def test_hosts_output_has_the_contract_fields() -> None:
    hosts = _blocks((MODULE / "outputs.tf").read_text(), "output")["hosts"]
    for field in HOST_FIELDS:
        assert re.search(rf"^\s+{field}\s+=", hosts, re.M), field


@pytest.mark.parametrize("root", ["aws", "local"])
def test_roots_expose_the_contract_outputs(root: str) -> None:
    outputs = _blocks((INFRA / root / "outputs.tf").read_text(), "output")
    assert {"hosts", "ssh_user", "tf_port", "cluster_name"} <= set(outputs)
    assert all("description" in body for body in outputs.values())


def test_local_root_never_uses_placement_groups_or_a_lookup() -> None:
    text = (INFRA / "local" / "main.tf").read_text()
    assert re.search(r"placement_group\s+=\s+false", text)
    assert re.search(r'ami_id\s+=\s+"ami-[0-9a-f]+"', text)
    assert "access_key" not in text and "secret_key" not in text


def test_module_avoids_arguments_missing_from_provider_3_39() -> None:
    text = "\n".join(re.sub(r"#.*", "", p.read_text()) for p in MODULE.glob("*.tf"))  # code, not comments
    for newer_only in ("interface_type", "instance_market_options", "aws_s3_bucket_versioning", "domain ",
                       "launch_template {", "aws_vpc_security_group_ingress_rule"):
        assert newer_only not in text, newer_only


def test_readme_documents_every_input_and_output() -> None:
    readme = (MODULE / "README.md").read_text()
    for name in VARIABLES:
        assert f"| `{name}` |" in readme, f"input {name} missing from README"
    for name in _blocks((MODULE / "outputs.tf").read_text(), "output"):
        assert f"| `{name}` |" in readme, f"output {name} missing from README"
