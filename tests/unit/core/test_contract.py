"""The contract is defined once: tfcluster/core/contract.py. This test reads the whole repository — Python, HCL, YAML,
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

from tfcluster.core import contract

ROLES_DIR = "playbooks/collections/ansible_collections/tfcluster/cluster/roles/"

REPO = Path(__file__).resolve().parents[3]
# Not product code: tests assert literal values on purpose, docs and examples explain them to people.
SKIP_PARTS = ("tests/", "docs/", "examples/", "molecule/", "bench/")
CONTRACT_FILE = "tfcluster/core/contract.py"
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
    assert not findings, "shared names written outside tfcluster/core/contract.py:\n" + "\n".join(findings)


# --- the scan can fail: one-place changes in a copy of the repository ----------------------------------------------
# (file, text to replace or None to append, new text, what the scan must then report)
ONE_PLACE_CHANGES = [
    (MODULE_TF, '"tfcluster:task_index"', '"tfcluster:task_idx"', "locals.tag_keys"),
    (VARIABLES_TF, f"= {contract.TF_PORT}", "= 2223", "tf_port default"),
    (ROLES_DIR + "tf_job/templates/job.service.j2", None, "SuccessExitStatus=4\n", "a literal exit status"),
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


# --- job ids tfcluster keeps for itself -----------------------------------------------------------------------------
@pytest.mark.parametrize("job", ["autostop", "AutoStop", "datasets", "preflight", "logs", "LOGS", "jobs", "firewall",
                                 "venv", "trainer", "wheelhouse", "prepared", "requirements"])
def test_a_reserved_job_id_is_refused_with_a_fix(job: str) -> None:
    problem = contract.name_problem("job", job, "JOB")
    assert problem is not None and problem.field == "JOB"
    assert f"{job!r} is a reserved job id" in problem.message
    assert problem.fix.startswith("choose another job id") and "autostop" in problem.fix
    assert contract.name_problem("job", problem.fix.rpartition("e.g. ")[2]) is None  # the example is valid


@pytest.mark.parametrize("job", ["mnist", "autostop-1", "my-logs", "jobs2", "datasets.v2", "Mnist"])
def test_names_beside_the_reserved_ones_are_fine(job: str) -> None:
    assert contract.name_problem("job", job) is None


def test_other_kinds_of_names_are_not_reserved() -> None:
    assert contract.name_problem("host", "logs") is None and contract.name_problem("ssh_user", "trainer") is None


def test_the_reserved_job_ids_reach_yaml() -> None:
    assert contract.contract_vars()["RESERVED_JOB_IDS"] == list(contract.RESERVED_JOB_IDS)
    assert all(name == name.lower() for name in contract.RESERVED_JOB_IDS)


@pytest.mark.parametrize("port", ["\u00b2", "\u0662\u0662\u0662\u0662", "22\u00b2", "\uff12\uff12"])
def test_a_port_has_ascii_digits_only(port: str) -> None:
    problems = contract.cluster_problems({"worker": [f"10.0.0.5:{port}"]})
    assert [p.field for p in problems] == ["cluster.worker[0]"] and "is not in 1..65535" in problems[0].message


# Fixed names under a host's tfcluster directories: a literal path, a role variable that holds such a directory
# followed by a literal name, or a unit under the job units' prefix (tfcluster-NAME.service is a job's unit name).
_HOST_ROOT = r"(?:etc|var/lib|var/log|run|opt)/tfcluster"
_NAME = r"([A-Za-z0-9_][A-Za-z0-9_.-]*)"
_FIXED_PATH = re.compile(rf"(?<![\w.-])/{_HOST_ROOT}/{_NAME}")
_ROOT_VARIABLE = re.compile(rf"""^\s*(\w+):\s*['"]?(?:\{{\{{[^}}]*\}}\}})?/{_HOST_ROOT}/?['"]?\s*$""", re.M)
_FIXED_UNIT = re.compile(rf"(?<![\w.-]){re.escape(contract.UNIT_PREFIX)}{_NAME}\.(?:service|timer|socket|path)\b")
# Job ids the code and its docs use as examples (a job's own files, not fixed names).
EXAMPLE_JOBS = frozenset({"mnist", "molecule", "j"})
HOST_CODE = ("playbooks/", "tfcluster/", "inventory/", "trainer/", "infra/")
HOST_SUFFIXES = (".py", ".yml", ".yaml", ".j2", ".sh", ".service", ".timer", ".tf", ".tpl", ".cfg")


def fixed_names(root: Path, files: Iterable[str]) -> dict[str, str]:
    """Every fixed name tfcluster uses beside the jobs' files, with where it was seen first."""
    contract_file = (root / CONTRACT_FILE).resolve()  # it lists them (and module_utils/contract.py links to it)
    texts = {rel: (root / rel).read_text(encoding="utf-8", errors="replace") for rel in files
             if rel.startswith(HOST_CODE) and rel.endswith(HOST_SUFFIXES) and (root / rel).is_file()
             and (root / rel).resolve() != contract_file}
    variables = {name for text in texts.values() for name in _ROOT_VARIABLE.findall(text)}
    uses = [_FIXED_PATH, _FIXED_UNIT]
    uses += [re.compile(rf"\{{\{{\s*{name}\s*\}}\}}/{_NAME}|\b{name}\s*~\s*['\"]/{_NAME}") for name in variables]
    found: dict[str, str] = {}
    for rel, text in texts.items():
        for number, line in enumerate(text.splitlines(), start=1):
            for pattern in uses:
                for match in pattern.finditer(line):
                    name = next(group for group in match.groups() if group)
                    found.setdefault(name, f"{rel}:{number}")
    return found


def unreserved_names(root: Path, files: Iterable[str]) -> list[str]:
    reserved = set(contract.RESERVED_JOB_IDS)
    return [f"{where}: {name!r} is a fixed name beside the jobs' files, but {name.split('.')[0].lower()!r} is not "
            "in contract.RESERVED_JOB_IDS: add it there (a job of that id would collide with it)"
            for name, where in sorted(fixed_names(root, files).items())
            if name.split(".")[0].lower() not in reserved and name.split(".")[0] not in EXAMPLE_JOBS]


def test_every_fixed_name_beside_the_jobs_files_is_reserved() -> None:
    files = list(product(repo_files(REPO)))
    names = fixed_names(REPO, files)
    assert {"autostop.json", "autostop", "datasets", "preflight", "firewall.nft", "venv"} <= set(names), names
    assert "tfcluster.firewall.service" not in names  # not under UNIT_PREFIX: not a job's name
    findings = unreserved_names(REPO, files)
    assert not findings, "\n".join(findings)


@pytest.mark.parametrize(("rel", "text", "name"), [
    (ROLES_DIR + "newrole/defaults/main.yml", "newrole_cache: /var/lib/tfcluster/cache\n", "cache"),
    (ROLES_DIR + "newrole/vars/main.yml", "_newrole_file: \"{{ tfcluster_prefix }}/etc/tfcluster/state.json\"\n",
     "state.json"),
    (ROLES_DIR + "newrole/defaults/main.yml",
     "newrole_dir: \"{{ tfcluster_prefix | default('') }}/run/tfcluster\"\n"
     "newrole_pid: \"{{ newrole_dir }}/newrole.pid\"\n", "newrole.pid"),
    ("tfcluster/host/newthing.py", 'SPOOL = "/var/log/tfcluster/spool"\n', "spool"),
    (ROLES_DIR + "newrole/templates/x.service.j2", "After=tfcluster-metrics.service\n", "metrics"),
])
def test_a_new_fixed_name_that_is_not_reserved_is_caught(tmp_path: Path, rel: str, text: str, name: str) -> None:
    (tmp_path / rel).parent.mkdir(parents=True)
    (tmp_path / rel).write_text(text)
    findings = unreserved_names(tmp_path, [rel])
    assert len(findings) == 1 and f"{name!r} is a fixed name" in findings[0] and findings[0].startswith(rel), findings


def test_only_job_units_are_named_under_the_unit_prefix() -> None:
    """Autostop counts every active `tfcluster-*.service` as a running job: a unit of ours under that prefix (the
    firewall's oneshot stays active) would keep every host up forever."""
    found = []
    for path in [*REPO.glob("playbooks/**/*.yml"), *REPO.glob("playbooks/**/*.j2"), *REPO.glob("tfcluster/**/*.py")]:
        for match in re.finditer(re.escape(contract.UNIT_PREFIX) + r"([A-Za-z0-9_.-]+)\.(service|timer)\b",
                                 path.read_text(errors="replace")):
            if "{" not in match.group(1):
                found.append(f"{path.relative_to(REPO)}: {match.group(0)}")
    assert not found, found
