"""Slurm's view of a job step, read in Slurm's own order: the resolver that gives every task of a ``CLUSTER=slurm``
job its slot and its TF_CONFIG. Standard library only (the ground floor: it runs inside every Slurm task).

Slurm numbers the tasks of a step (``SLURM_PROCID``) in node-list order: with the block distribution (the default,
and what tfcluster's step asks for) the first node's tasks come first, then the second node's, and so on, each node
holding the count ``SLURM_STEP_TASKS_PER_NODE`` gives it. The node list (``SLURM_STEP_NODELIST``) is a Slurm hostlist:
``node[9-11]``, ``gpu[08-11]``, ``a[1-2],b3``, ``rack[1-2]-n[01-02]``; the counts are ``2(x3),1``.

TensorFlow's own ``SlurmClusterResolver`` sorts the host names as strings before it hands out addresses, so on
``n[9-10]`` the task on ``n9`` (PROCID 0) is told that task 0 lives on ``n10``. Here nothing is sorted: task *i* is on
the node Slurm put it on, and every task of the step computes the same cluster spec from the same variables.

Task *i* holds the *i*-th declared slot in slot order (chief, ps, worker, evaluator; then index), so the declared
layout, not the launch, decides who is the chief. Its port is the base port plus its local id on the node (two tasks
on one node never share a port). The resolver never touches ``CUDA_VISIBLE_DEVICES``: where Slurm binds GPUs, the
binding is Slurm's.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .contract import (
    CLUSTER_TASK_TYPES,
    EVALUATOR,
    NO_TF_CONFIG_STRATEGIES,
    SLOT_ORDER,
    TF_PORT,
    Problem,
    TFConfigError,
    build_tf_config,
    is_digits,
    name_problem,
    resolve_strategy,
    tf_config_json,
)

# What srun sets in every task of a step (and what the resolver reads).
ENV_PROCID = "SLURM_PROCID"
ENV_LOCALID = "SLURM_LOCALID"
ENV_NODELIST = "SLURM_STEP_NODELIST"
ENV_TASKS_PER_NODE = "SLURM_STEP_TASKS_PER_NODE"
ENV_NUM_TASKS = "SLURM_STEP_NUM_TASKS"
ENV_NODENAME = "SLURMD_NODENAME"
ENV_JOB_ID = "SLURM_JOB_ID"
ENV_RESTART_COUNT = "SLURM_RESTART_COUNT"  # how often the job was requeued (absent: never)
STEP_ENV: tuple[str, ...] = (ENV_PROCID, ENV_LOCALID, ENV_NODELIST, ENV_TASKS_PER_NODE, ENV_NODENAME)

MAX_TASKS = 65536  # a step larger than this is refused rather than expanded (a hostlist like n[0-999999999])
_COUNT = re.compile(r"([0-9]+)(?:\(x([0-9]+)\))?")
_RANGE = re.compile(r"([0-9]+)(?:-([0-9]+))?")


class SlurmError(ValueError):
    """What Slurm's environment (or the declared layout) gets wrong, every problem at once."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


def _fail(field: str, message: str, fix: str) -> SlurmError:
    return SlurmError([Problem(field, message, fix)])


# --- Slurm's notations ----------------------------------------------------------------------------------------------
def split_top(text: str, field: str = ENV_NODELIST) -> list[str]:
    """``a[1-2,5],b3`` -> ``["a[1-2,5]", "b3"]``: commas outside brackets separate the items."""
    items, depth, current = [], 0, ""
    for char in text:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        if depth not in (0, 1):
            raise _fail(field, f"{text!r} has unbalanced or nested brackets", "give a Slurm hostlist, e.g. n[9-11]")
        if char == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += char
    if depth:
        raise _fail(field, f"{text!r} has an unclosed '['", "give a Slurm hostlist, e.g. n[9-11]")
    items.append(current)
    if any(not item for item in items):
        raise _fail(field, f"{text!r} has an empty item", "give a Slurm hostlist, e.g. a[1-2],b3")
    return items


def expand_range(body: str, field: str = ENV_NODELIST) -> list[str]:
    """``08-11,13`` -> ``["08", "09", "10", "11", "13"]``: each bound keeps the width of its low end (zero padding)."""
    out: list[str] = []
    for part in body.split(","):
        match = _RANGE.fullmatch(part)
        if match is None:
            raise _fail(field, f"range [{body}] holds {part!r}", "write ranges as LOW-HIGH or single numbers, "
                        "e.g. [08-11,13]")
        low, high = match.group(1), match.group(2) or match.group(1)
        if int(high) < int(low):
            raise _fail(field, f"range {part!r} runs backwards", f"write it as {high}-{low}")
        if len(out) + int(high) - int(low) >= MAX_TASKS:
            raise _fail(field, f"range [{body}] names more than {MAX_TASKS} hosts", "give the step's own node list")
        out += [str(number).zfill(len(low)) for number in range(int(low), int(high) + 1)]
    return out


def _expand_item(item: str, field: str) -> list[str]:
    """One hostlist item; several bracket groups expand like Slurm's: the leftmost group varies slowest."""
    pieces: list[list[str]] = []
    for literal, body in re.findall(r"([^\[\]]*)(?:\[([^\]]*)\])?", item):
        if literal:
            pieces.append([literal])
        if body:
            pieces.append(expand_range(body, field))
    if "[]" in item:
        raise _fail(field, f"{item!r} has an empty range []", "give numbers inside the brackets, e.g. n[1-3]")
    return ["".join(parts) for parts in itertools.product(*pieces)]


def expand_hostlist(text: str, field: str = ENV_NODELIST) -> tuple[str, ...]:
    """A Slurm hostlist in Slurm's order, never sorted and never deduplicated: ``n[9-11]`` -> n9, n10, n11."""
    if not isinstance(text, str) or not text.strip():
        raise _fail(field, "is empty or missing", "run inside a Slurm step (srun), which sets it")
    hosts: list[str] = []
    for item in split_top(text.strip(), field):
        hosts += _expand_item(item, field)
        if len(hosts) > MAX_TASKS:
            raise _fail(field, f"{text[:60]!r} names more than {MAX_TASKS} hosts", "give the step's own node list")
    return tuple(hosts)


def expand_tasks_per_node(text: str, field: str = ENV_TASKS_PER_NODE) -> tuple[int, ...]:
    """``2(x3),1`` -> (2, 2, 2, 1): the count of each node of the node list, in its order."""
    if not isinstance(text, str) or not text.strip():
        raise _fail(field, "is empty or missing", "run inside a Slurm step (srun), which sets it")
    counts: list[int] = []
    for part in text.strip().split(","):
        match = _COUNT.fullmatch(part)
        if match is None:
            raise _fail(field, f"{text!r} holds {part!r}", "give counts like 2(x3),1")
        times = int(match.group(2) or 1)
        if len(counts) + times > MAX_TASKS:
            raise _fail(field, f"{text!r} counts more than {MAX_TASKS} nodes", "give the step's own counts")
        counts += [int(match.group(1))] * times
    return tuple(counts)


# --- the declared layout --------------------------------------------------------------------------------------------
def declared_slots(tasks: Mapping[str, int]) -> tuple[tuple[str, int], ...]:
    """Every slot of a layout ``{task type: count}``, in slot order (chief, ps, worker, evaluator), then index."""
    unknown = sorted(set(tasks) - set(SLOT_ORDER))
    if unknown:
        raise _fail("tasks", f"unknown task type(s) {', '.join(unknown)}", f"use {', '.join(SLOT_ORDER)}")
    return tuple((task_type, index) for task_type in SLOT_ORDER for index in range(int(tasks.get(task_type, 0))))


def placement(nodes: Sequence[str], counts: Sequence[int]) -> tuple[tuple[str, int], ...]:
    """(node, local id) of every task, by PROCID: the block distribution, node by node in the node list's order."""
    if len(nodes) != len(counts):
        raise _fail(ENV_TASKS_PER_NODE, f"counts {len(counts)} nodes but {ENV_NODELIST} names {len(nodes)}",
                    "run inside one Slurm step: both come from srun")
    return tuple((node, local) for node, count in zip(nodes, counts, strict=True) for local in range(count))


def cluster_spec(places: Sequence[tuple[str, int]], slots: Sequence[tuple[str, int]],
                 base_port: int = TF_PORT) -> dict[str, list[str]]:
    """``{task type: [node:port, ...]}`` of every slot but the evaluator's (never inside ``cluster``)."""
    spec: dict[str, list[str]] = {}
    for (task_type, _index), (node, local) in zip(slots, places, strict=True):
        if task_type != EVALUATOR:
            spec.setdefault(task_type, []).append(f"{node}:{base_port + local}")
    return {task_type: spec[task_type] for task_type in CLUSTER_TASK_TYPES if task_type in spec}


@dataclass(frozen=True)
class Step:
    """What srun told one task: the step's nodes and counts, this task's PROCID, local id and node."""

    nodes: tuple[str, ...]
    counts: tuple[int, ...]
    procid: int
    local_id: int
    nodename: str

    @property
    def places(self) -> tuple[tuple[str, int], ...]:
        return placement(self.nodes, self.counts)


def _whole(env: Mapping[str, str], key: str, problems: list[Problem]) -> int:
    raw = env.get(key, "")
    if not is_digits(raw):
        problems.append(Problem(key, f"{raw!r} is not a whole number" if raw else "is not set",
                                "run the task inside a Slurm step (srun), which sets it"))
        return -1
    return int(raw)


def step_from_env(env: Mapping[str, str]) -> Step:
    """The step as srun describes it to this task; SlurmError naming every variable that is missing or wrong."""
    problems: list[Problem] = []
    nodes: tuple[str, ...] = ()
    counts: tuple[int, ...] = ()
    for key, parse in ((ENV_NODELIST, expand_hostlist), (ENV_TASKS_PER_NODE, expand_tasks_per_node)):
        try:
            value = parse(env.get(key, ""), key)
        except SlurmError as exc:
            problems += exc.problems
            continue
        if key == ENV_NODELIST:
            nodes = value  # type: ignore[assignment]
        else:
            counts = value  # type: ignore[assignment]
    procid, local_id = _whole(env, ENV_PROCID, problems), _whole(env, ENV_LOCALID, problems)
    nodename = env.get(ENV_NODENAME, "")
    if not nodename:
        problems.append(Problem(ENV_NODENAME, "is not set", "run the task inside a Slurm step (srun), which sets it"))
    if problems:
        raise SlurmError(problems)
    return Step(nodes=nodes, counts=counts, procid=procid, local_id=local_id, nodename=nodename)


# --- one task's slot and TF_CONFIG ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Resolved:
    """One task of the step: its slot, where it runs and listens, and the TF_CONFIG every task agrees on."""

    task_type: str
    task_index: int
    node: str
    local_id: int
    port: int
    cluster: Mapping[str, Sequence[str]]
    tf_config: str  # '' under the mirrored and tpu strategies (one task, no cluster)

    @property
    def slot(self) -> str:
        """``worker-1``: the task's name in file names on the shared directory."""
        return f"{self.task_type}-{self.task_index}"

    @property
    def address(self) -> str:
        return f"{self.node}:{self.port}"


def _layout_problems(step: Step, slots: Sequence[tuple[str, int]], places: Sequence[tuple[str, int]]) -> list[Problem]:
    problems = [problem for node in dict.fromkeys(step.nodes)
                if (problem := name_problem("host", node, ENV_NODELIST)) is not None]
    if len(places) != len(slots):
        problems.append(Problem("tasks", f"the step has {len(places)} task(s) ({ENV_TASKS_PER_NODE}="
                                f"{','.join(map(str, step.counts))}) but the layout declares {len(slots)}",
                                "declare as many tasks as nodes x tasks_per_node in the cluster file"))
    elif not 0 <= step.procid < len(places):
        problems.append(Problem(ENV_PROCID, f"{step.procid} is not a task of this step (0..{len(places) - 1})",
                                "run the task inside the job's own step"))
    elif places[step.procid] != (step.nodename, step.local_id):
        node, local = places[step.procid]
        problems.append(Problem(ENV_PROCID, f"task {step.procid} should be local task {local} on {node} (block "
                                f"distribution), but it runs as local task {step.local_id} on {step.nodename}",
                                "launch the step with srun --distribution=block (tfcluster's batch script does)"))
    return problems


def resolve(step: Step, tasks: Mapping[str, int], base_port: int = TF_PORT, strategy: str = "auto") -> Resolved:
    """This task's slot and TF_CONFIG; SlurmError (every problem) when the step and the layout disagree."""
    slots = declared_slots(tasks)
    places = step.places
    problems = _layout_problems(step, slots, places)
    if base_port < 1 or base_port + max(step.counts or (1,)) - 1 > 65535:
        problems.append(Problem("port", f"{base_port} + local ids does not fit in 1..65535", "use a lower port"))
    if problems:
        raise SlurmError(problems)
    spec = cluster_spec(places, slots, base_port)
    task_type, task_index = slots[step.procid]
    node, local = places[step.procid]
    no_cluster = resolve_strategy(spec, strategy) in NO_TF_CONFIG_STRATEGIES
    try:
        build_tf_config(spec, None if no_cluster else task_type, None if no_cluster else task_index, strategy)
    except TFConfigError as exc:
        raise SlurmError(exc.problems) from None
    tf_config = "" if no_cluster else tf_config_json(spec, task_type, task_index)
    return Resolved(task_type=task_type, task_index=task_index, node=node, local_id=local, port=base_port + local,
                    cluster=spec, tf_config=tf_config)


def resolve_env(env: Mapping[str, str], tasks: Mapping[str, int], base_port: int = TF_PORT,
                strategy: str = "auto") -> Resolved:
    """:func:`resolve` of the step srun describes in ``env``."""
    return resolve(step_from_env(env), tasks, base_port, strategy)


def sample_step(nodes: Sequence[str], tasks_per_node: int, procid: int = 0) -> Step:
    """A step as srun would describe it to task ``procid`` on ``nodes`` with ``tasks_per_node`` each (`make plan`)."""
    counts = tuple([tasks_per_node] * len(nodes))
    node, local = placement(tuple(nodes), counts)[procid]
    return Step(nodes=tuple(nodes), counts=counts, procid=procid, local_id=local, nodename=node)
