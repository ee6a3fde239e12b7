"""Static checks of the Terraform sources against the contract and each other: every validation is exercised and says
how to fix, the tag keys and ports equal tfcluster.core.contract, the roots pass every input and expose the same
outputs,
the hosts output is what the inventory accepts. Text-level (no terraform needed)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tfcluster.core import contract
from tfcluster.inventory.sources.terraform import HOST_FIELDS

INFRA = Path(__file__).resolve().parents[3] / "infra"
MODULE = INFRA / "modules" / "gpu_cluster"
ROOT_OUTPUTS = {"hosts", "connect", "bastion", "ssh_user", "tf_port", "cluster_name", "region", "availability_zone",
                "gpu_vendor", "checkpoint_s3", "autostop_down", "expires_at",
                # the CLI: zone failover, `make plan`'s newer-image line, the instance store, the boot guard
                "offering_zones", "ami_in_use", "ami_latest", "instance_store", "autostop"}
ROOTS = ("aws", "local", "examples/efa")


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


def _read(*parts: str) -> str:
    return "\n".join(p.read_text() for part in parts for p in sorted(INFRA.glob(part)))


VARIABLES = _blocks((MODULE / "variables.tf").read_text(), "variable")
OUTPUTS = _blocks((MODULE / "outputs.tf").read_text(), "output")
TESTS = "\n".join(p.read_text() for p in (MODULE / "tests").glob("*.tftest.hcl"))
ERROR_MESSAGES = re.findall(r'error_message\s+=\s+"((?:[^"\\]|\\.)*)"', _read("**/*.tf"))


def test_every_variable_has_description_and_type() -> None:
    for name, body in VARIABLES.items():
        assert re.search(r"^\s+description\s+=", body, re.M), name
        assert re.search(r"^\s+type\s+=", body, re.M), name


@pytest.mark.parametrize("name", sorted(n for n, b in VARIABLES.items() if "validation {" in b))
def test_every_validation_has_a_failing_run(name: str) -> None:
    validations = VARIABLES[name].count("validation {")
    runs = len(re.findall(rf"expect_failures\s+=\s+\[[^\]]*var\.{name}\b", TESTS))
    assert runs >= validations, f"var.{name}: {validations} validation blocks but {runs} failing runs"


def test_error_messages_say_what_to_fix() -> None:
    assert len(ERROR_MESSAGES) >= 40  # 43 today: every validation of the module and the roots
    for message in ERROR_MESSAGES:
        assert re.search(r"\. Fix: \S", message), f"no 'Fix:' sentence: {message}"
        assert message.endswith("."), message


def test_tag_keys_equal_the_contract_and_live_in_one_place() -> None:
    main = (MODULE / "main.tf").read_text()
    block = re.search(r"tag_keys = \{(.*?)\n  \}", main, re.S)
    assert block, "locals.tag_keys is missing from main.tf"
    assert dict(re.findall(r'^\s*(\w+)\s*=\s*"([^"]*)"', block.group(1), re.M)) == contract.TAG_KEYS
    outside = _read("**/*.tf", "**/*.tftest.hcl").replace(block.group(0), "")
    assert not re.search(rf'"{contract.TAG_PREFIX}\w+"', outside), "a tfcluster:* tag key written outside tag_keys"
    readme = (MODULE / "README.md").read_text()
    for key in contract.TAG_KEYS.values():
        assert f"`{key}`" in readme, f"{key} not named in the module README"


def _default(body: str) -> str | None:
    match = re.search(r"^\s+default\s+=\s+(.+)$", body, re.M)
    return match.group(1).strip() if match else None


def test_ports_and_task_types_equal_the_contract() -> None:
    assert _default(VARIABLES["tf_port"]) == str(contract.TF_PORT)
    local_vars = _blocks((INFRA / "local" / "variables.tf").read_text(), "variable")
    assert _default(local_vars["base_port"]) == str(contract.LOCAL_BASE_PORT)
    order = re.search(r"task_order = \[([^\]]*)\]", (MODULE / "main.tf").read_text())
    assert order and tuple(re.findall(r'"(\w+)"', order.group(1))) == contract.SLOT_ORDER
    slot_types = re.search(r"contains\(\[([^\]]*)\], t\)", VARIABLES["slots"])
    assert slot_types and set(re.findall(r'"(\w+)"', slot_types.group(1))) == set(contract.TASK_TYPES)
    assert f'"^{contract.NAME_RULES["cluster"].pattern}$"' in VARIABLES["cluster_name"]
    assert f'"^{contract.NAME_RULES["ssh_user"].pattern}$"' in VARIABLES["ssh_user"]


def test_no_other_hcl_copy_of_a_port() -> None:
    """Each port is written once, as a default; infra/aws and the EFA root leave tf_port to the module (null)."""
    hcl = _read("**/*.tf")
    for value in (contract.TF_PORT, contract.LOCAL_BASE_PORT):
        assert len(re.findall(rf"\b{value}\b", hcl)) == 1, value


def test_hosts_output_is_what_the_inventory_accepts() -> None:
    fields = set(re.findall(r"^\s{6}(\w+)\s+=", OUTPUTS["hosts"], re.M))
    assert fields == set(HOST_FIELDS), fields ^ set(HOST_FIELDS)


@pytest.mark.parametrize("root", ROOTS)
def test_roots_expose_the_same_outputs(root: str) -> None:
    outputs = _blocks((INFRA / root / "outputs.tf").read_text(), "output")
    assert set(outputs) >= ROOT_OUTPUTS, ROOT_OUTPUTS - set(outputs)
    assert all("description" in body for body in outputs.values())


def test_aws_root_passes_every_module_input() -> None:
    call = _blocks((INFRA / "aws" / "main.tf").read_text(), "module")["cluster"]
    passed = dict(re.findall(r"^\s+(\w+)\s+=\s+var\.(\w+)\s*$", call, re.M))
    root_vars = _blocks((INFRA / "aws" / "variables.tf").read_text(), "variable")
    internal = {"launch_instances", "efa", "tags"}  # infra/examples/efa's; tags: the provider's default_tags
    assert set(VARIABLES) - internal == set(passed), set(VARIABLES) ^ set(passed)
    assert all(passed[name] == name and name in root_vars for name in passed)
    for name in passed:  # the module holds the default; the root leaves it (null) unless the root's own
        if name != "cluster_name":
            assert _default(root_vars[name]) == "null", f"infra/aws variable {name} repeats a module default"


def test_local_root_is_emulator_safe() -> None:
    text = (INFRA / "local" / "main.tf").read_text()
    assert re.search(r"placement_group\s+=\s+false", text) and re.search(r"monitoring\s+=\s+false", text)
    assert re.search(r'ami_id\s+=\s+"ami-[0-9a-f]+"', text)
    assert "access_key" not in text and "secret_key" not in text


def test_module_uses_nothing_missing_from_3_39_or_deprecated_now() -> None:
    text = re.sub(r"#.*", "", _read("modules/gpu_cluster/*.tf"))  # code, not comments
    for name in ("interface_type", "instance_market_options", "launch_template", "primary_network_interface",
                 "network_interface {", 'data "aws_region"', "aws_vpc_security_group_ingress_rule", "locations",
                 "cpu_core_count", "block_duration_minutes", "inline_policy", "domain ", "aws_s3_bucket",
                 "capacity_reservation_specification", "instance_metadata_tags", "efa_maximum_interfaces",
                 "maximum_network_cards"):
        assert name not in text, name


def test_readme_documents_every_input_and_output() -> None:
    readme = (MODULE / "README.md").read_text()
    for name in VARIABLES:
        assert f"| `{name}` |" in readme, f"input {name} missing from the module README"
    for name in OUTPUTS:
        assert f"| `{name}` |" in readme, f"output {name} missing from the module README"
