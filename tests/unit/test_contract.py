"""The contract is defined once: tfcluster/contract.py. This test reads the whole repository — Python, HCL, YAML,
Jinja, unit templates and host scripts — and fails where a shared name is written out again.

* Python imports the contract: no string or number constant equal to a contract value (tag keys, model-dir file
  names, job env names, task types, ports) outside contract.py, and no module defines its own EXIT_* code.
* YAML and Jinja read names through ``lookup('tfcluster.cluster.contract', NAME)``: no literal tag key, model-dir
  file name, env name or port, and no literal exit status in a unit; every looked-up NAME exists.
* HCL holds the one declared copy, in infra/modules/gpu_cluster (``locals { tag_keys }``, ``task_order``, the
  tf_port default, the cluster name and SSH user patterns, the connect modes) and infra/local's base_port: each is
  compared with the contract.

``test_a_change_in_one_place_is_caught`` makes such one-place changes in a copy and shows the scan catches each.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
import yaml

from tfcluster import contract

REPO = Path(__file__).resolve().parents[2]
# Not product code: tests assert literal values on purpose, docs and examples explain them to people.
SKIP_PARTS = ("tests/", "docs/", "examples/", "molecule/", "bench/")
CONTRACT_FILE = "tfcluster/contract.py"
TEXT_SUFFIXES = (".yml", ".yaml", ".j2", ".sh", ".cfg", ".service", ".timer")
MODULE_TF = "infra/modules/gpu_cluster/main.tf"
VARIABLES_TF = "infra/modules/gpu_cluster/variables.tf"
LOCAL_VARIABLES_TF = "infra/local/variables.tf"


def string_values() -> dict[str, str]:
    """Every string the contract defines that must not be written again, with its name."""
    values = {f"TAG_KEYS[{k}]": v for k, v in contract.TAG_KEYS.items()}
    for name in ("DONE", "MANIFEST", "STATUS", "METRICS", "CONFIG", "ENV_TF_CONFIG", "ENV_JOB", "ENV_MODEL_DIR",
                 "ENV_TASK_TYPE", "ENV_TASK_INDEX", "ENV_DATASETS", "ENV_GPUS", "ENV_COLLECTIVE",
                 "ENV_CHECKPOINT_S3", "ENV_S3_ENDPOINT_URL"):
        values[name] = getattr(contract, name)
    return values


def python_values() -> dict[str, object]:
    """What Python must import rather than write: the strings above, the task types and the ports."""
    values: dict[str, object] = dict(string_values())
    values.update({f"TASK_TYPES[{t}]": t for t in contract.TASK_TYPES})
    values.update(TF_PORT=contract.TF_PORT, LOCAL_BASE_PORT=contract.LOCAL_BASE_PORT)
    return values


def repo_files(root: Path) -> list[str]:
    """Tracked and new (not ignored) files, relative POSIX paths."""
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=root,
                         capture_output=True, text=True, check=True).stdout
    return sorted({line for line in out.splitlines() if (root / line).is_file()})


def product(files: Iterable[str]) -> Iterator[str]:
    return (f for f in files if not f.startswith(SKIP_PARTS) and ".example." not in f)


# --- Python ---------------------------------------------------------------------------------------------------------
def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            ids.add(id(body[0].value))
    return ids


def python_findings(root: Path, files: Iterable[str]) -> list[str]:
    wanted = {value: name for name, value in python_values().items()}
    found = []
    for rel in files:
        if not rel.endswith(".py") or rel == CONTRACT_FILE or (root / rel).resolve() == root / CONTRACT_FILE:
            continue
        tree = ast.parse((root / rel).read_text(encoding="utf-8"), rel)
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and id(node) not in docs and not isinstance(node.value, bool) \
                    and isinstance(node.value, (str, int)) and node.value in wanted:
                found.append(f"{rel}:{node.lineno}: {node.value!r} is contract.{wanted[node.value]}: import it")
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, ast.AnnAssign) else []
            for target in targets:
                if isinstance(target, ast.Name) and re.fullmatch(r"(EXIT_\w+|\w+_EXIT)", target.id):
                    found.append(f"{rel}:{node.lineno}: {target.id} defines an exit code: use contract.EXIT_*")
    return found


# --- YAML, Jinja, units, scripts ------------------------------------------------------------------------------------
_COMMENT = re.compile(r"(^|\s)#(?![}%]).*$")  # a YAML/shell comment; not Jinja's {# #} or '#}'
_EXIT_LITERAL = re.compile(r"(SuccessExitStatus|RestartPreventExitStatus)\s*=\s*[0-9]|"
                           r"\b(rc|exit_code|returncode)\s*(==|!=|in)\s*\[?\s*[1-9]\b")
_PORTS = re.compile(rf"\b({contract.TF_PORT}|{contract.LOCAL_BASE_PORT})\b")
_LOOKUP = re.compile(r"""lookup\(\s*['"]tfcluster\.cluster\.contract['"]\s*,\s*['"]([^'"]+)['"]""")
_LOOKUP_CALL = re.compile(r"""lookup\(\s*['"]tfcluster\.cluster\.contract['"][^)]*\)""")


PROSE_KEYS = frozenset({"name", "description", "short_description"})  # task names and argument-spec docs


def _code_lines(text: str) -> Iterator[tuple[int, str]]:
    for number, line in enumerate(text.splitlines(), start=1):
        yield number, _COMMENT.sub("", line)


def _yaml_strings(node: object, key: str = "") -> Iterator[str]:
    if isinstance(node, dict):
        for sub, value in node.items():
            if sub not in PROSE_KEYS:
                yield from _yaml_strings(value, str(sub))
                yield str(sub)
    elif isinstance(node, list):
        for value in node:
            yield from _yaml_strings(value, key)
    elif isinstance(node, str):
        yield node


def _lines(rel: str, text: str) -> Iterator[tuple[object, str]]:
    """What to scan of a file: YAML as its values minus prose (task names, docs); anything else by line."""
    if rel.endswith((".yml", ".yaml")):
        for index, value in enumerate(_yaml_strings(list(yaml.safe_load_all(text)))):
            for line in value.splitlines():
                yield f"value {index}", line
    else:
        yield from _code_lines(text)


def text_findings(root: Path, files: Iterable[str]) -> list[str]:
    strings = string_values()
    patterns = {name: re.compile(rf"(?<![\w.:-]){re.escape(value)}(?![\w.-])") for name, value in strings.items()}
    names = contract.contract_vars()
    found = []
    for rel in files:
        if not rel.endswith(TEXT_SUFFIXES) and "/templates/" not in rel:
            continue
        for number, line in _lines(rel, (root / rel).read_text(encoding="utf-8", errors="replace")):
            bare = _LOOKUP_CALL.sub("", line)  # the lookup names a contract name; that is no copy
            for name, pattern in patterns.items():
                if pattern.search(bare):
                    found.append(f"{rel}:{number}: {strings[name]!r} is contract.{name}: use "
                                 f"lookup('tfcluster.cluster.contract', '{name.split('[')[0]}')")
            if _EXIT_LITERAL.search(line):
                found.append(f"{rel}:{number}: a literal exit status: use lookup(..., 'EXIT_CODES.<name>')")
            if _PORTS.search(line):
                found.append(f"{rel}:{number}: a contract port written out: use lookup(..., 'TF_PORT')")
            for term in _LOOKUP.findall(line):
                value: object = names
                for part in term.split("."):
                    value = value.get(part) if isinstance(value, dict) else None
                if value is None:
                    found.append(f"{rel}:{number}: the contract has no name {term!r}")
    return found


# --- HCL: the declared copies ---------------------------------------------------------------------------------------
def _block(text: str, opener: str) -> str:
    start = text.find(opener)
    if start < 0:
        return ""
    depth, index = 0, text.index("{", start)
    for position in range(index, len(text)):
        depth += {"{": 1, "}": -1}.get(text[position], 0)
        if depth == 0:
            return text[index:position + 1]
    return text[index:]


def _default(text: str, variable: str) -> str | None:
    match = re.search(r"\bdefault\s*=\s*([0-9]+)", _block(text, f'variable "{variable}"'))
    return match.group(1) if match else None


def declared_copy_findings(root: Path) -> list[str]:
    """The copies HCL must hold, each compared with the contract."""
    found = []
    module = (root / MODULE_TF).read_text()
    declared = dict(re.findall(r'^\s*(\w+)\s*=\s*"([^"]*)"', _block(module, "tag_keys = {"), re.M))
    if declared != contract.TAG_KEYS:
        found.append(f"{MODULE_TF}: locals.tag_keys {declared} != contract.TAG_KEYS {contract.TAG_KEYS}")
    order = re.search(r"task_order\s*=\s*\[([^\]]*)\]", module)
    if order is None or tuple(re.findall(r'"(\w+)"', order.group(1))) != contract.SLOT_ORDER:
        found.append(f"{MODULE_TF}: task_order != contract.SLOT_ORDER {contract.SLOT_ORDER}")
    variables = (root / VARIABLES_TF).read_text()
    if _default(variables, "tf_port") != str(contract.TF_PORT):
        found.append(f"{VARIABLES_TF}: tf_port default != contract.TF_PORT {contract.TF_PORT}")
    for variable, kind in (("cluster_name", "cluster"), ("ssh_user", "ssh_user")):
        if f'"^{contract.NAME_RULES[kind].pattern}$"' not in _block(variables, f'variable "{variable}"'):
            found.append(f"{VARIABLES_TF}: the {variable} pattern != contract.NAME_RULES[{kind!r}]")
    modes = re.search(r"contains\(\[([^\]]*)\],\s*var\.connect\)", _block(variables, 'variable "connect"'))
    if modes is None or tuple(re.findall(r'"(\w+)"', modes.group(1))) != contract.CONNECT_MODES:
        found.append(f"{VARIABLES_TF}: the connect modes != contract.CONNECT_MODES {contract.CONNECT_MODES}")
    if _default((root / LOCAL_VARIABLES_TF).read_text(), "base_port") != str(contract.LOCAL_BASE_PORT):
        found.append(f"{LOCAL_VARIABLES_TF}: base_port default != contract.LOCAL_BASE_PORT")
    return found


def hcl_findings(root: Path, files: Iterable[str]) -> list[str]:
    found = declared_copy_findings(root)
    module = (root / MODULE_TF).read_text()
    declared_block = _block(module, "tag_keys = {")
    for rel in files:
        if not rel.endswith(".tf"):
            continue
        text = (root / rel).read_text()
        if rel == MODULE_TF:
            text = text.replace(declared_block, "")
        for number, line in _code_lines(text):
            if re.search(r'"tfcluster:\w+"', line):
                found.append(f"{rel}:{number}: a tag key outside locals.tag_keys of {MODULE_TF}")
    return found


def test_the_contract_is_defined_once() -> None:
    findings = all_findings_in(REPO, list(product(repo_files(REPO))))
    assert not findings, "shared names written outside tfcluster/contract.py:\n" + "\n".join(findings)


# --- the scan can fail: one-place changes in a copy of the repository ----------------------------------------------
# (file, text to replace or None to append, new text, what the scan must then report)
ONE_PLACE_CHANGES = [
    (MODULE_TF, '"tfcluster:task_index"', '"tfcluster:task_idx"', "locals.tag_keys"),
    (VARIABLES_TF, f"= {contract.TF_PORT}", "= 2223", "tf_port default"),
    ("playbooks/roles/tf_job/templates/job.service.j2", None, "SuccessExitStatus=4\n", "a literal exit status"),
    ("playbooks/site.yml", None, "---\npath: /m/MANIFEST.sha256\n", "'MANIFEST.sha256' is contract.MANIFEST"),
    ("trainer/cli.py", None, 'DONE_FILE = "DONE"\n', "'DONE' is contract.DONE"),
    ("trainer/cli.py", None, "EXIT_SPOT = 3\n", "EXIT_SPOT defines an exit code"),
]


@pytest.mark.parametrize(("rel", "old", "new", "expected"), ONE_PLACE_CHANGES,
                         ids=[c[3] for c in ONE_PLACE_CHANGES])
def test_a_change_in_one_place_is_caught(tmp_path: Path, rel: str, old: str | None, new: str, expected: str) -> None:
    files = list(product(repo_files(REPO)))
    copy = tmp_path / "repo"
    for name in [*files, CONTRACT_FILE]:
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / name, copy / name)
    text = (copy / rel).read_text()
    assert old is None or old in text, f"{rel} no longer holds {old!r}: update this test"
    (copy / rel).write_text(text.rstrip("\n") + "\n" + new if old is None else text.replace(old, new, 1))
    added = set(all_findings_in(copy, files)) - set(all_findings_in(REPO, files))
    assert any(expected in line for line in added), sorted(added)


def all_findings_in(root: Path, files: list[str]) -> list[str]:
    return python_findings(root, files) + text_findings(root, files) + hcl_findings(root, files)
