"""No forgotten cluster: every tfcluster cluster in a region, read from the EC2 tags (contract.TAG_KEYS).

    ec2 = boto3.client("ec2", region_name=...)
    print(clusters_report(ec2))                      # make clusters (= render_clusters(list_clusters(ec2, now)))
    print(running_summary(ec2, "tfcluster-aws"))     # the end of make train
    state = state_slots(terraform_outputs["hosts"])  # the applied state's instance ids and slots
    left = remaining_instances(ec2, "tfcluster-aws", state)   # make destroy: left.ours must be empty
    print(render_remaining("tfcluster-aws", left, ec2.meta.region_name))
    set_shutdown_behavior(ec2, "tfcluster-aws", "terminate", state)   # make autostop DOWN=1
    result = start_instances(ec2, "tfcluster-aws", state)             # make start: until every one runs

An instance is a tfcluster instance when it carries a valid cluster name (``tfcluster:cluster``) and a task type
(``tfcluster:task_type``) of the contract; any other instance (no tags, someone else's tag set, a hand-made
``tfcluster:cluster`` without a slot) is never listed or counted. Tags are only a claim: anyone may write them.
What is *changed* (``set_shutdown_behavior``) or held to account (``remaining_instances``) is narrower: an instance
the applied Terraform state holds for the cluster, whose contract tags name the slot the state gives it
(``members``); anything else carrying the cluster tag is reported as not ours and left alone. Terminated instances
are gone. Cost figures are estimates (tfcluster/cost/prices.py: a dated on-demand table) and say so.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from tfcluster.core.contract import SLOT_ORDER, TAG_KEYS, TASK_TYPES, is_digits, name_problem
from tfcluster.core.duration import format_duration, parse_time
from tfcluster.cost import prices

UTC = timezone.utc  # datetime.UTC is Python >= 3.11; the control machine may run 3.10

# Every state but terminated: an instance in one of them still exists (and a stopped one still has its volumes).
LIVE_STATES: tuple[str, ...] = ("pending", "running", "shutting-down", "stopping", "stopped")
BILLED_STATES: frozenset[str] = frozenset({"pending", "running"})  # compute is billed only in these
SHUTDOWN_BEHAVIORS: tuple[str, ...] = ("stop", "terminate")
# How a user tears a cluster down ({name}: the cluster). The CLI may pass its own.
TEARDOWN = "make destroy CLUSTER=aws TFCLUSTER_CLUSTER={name}"
# What the applied Terraform state holds for a cluster: instance id -> slot ("worker:1"); see state_slots.
StateSlots = Mapping[str, str]


@dataclass(frozen=True)
class Instance:
    instance_id: str
    cluster: str
    instance_type: str
    state: str
    slot: str  # "worker:1"
    launched: datetime | None
    expires: datetime | None  # None: no tag, or a tag that is not an RFC 3339 time (expires_tag keeps it)
    expires_tag: str | None
    spot: bool

    @property
    def slot_key(self) -> tuple[int, int, str]:
        task_type, _, index = self.slot.partition(":")
        return (SLOT_ORDER.index(task_type), int(index) if is_digits(index) else 0, self.instance_id)


@dataclass(frozen=True)
class NotOurs:
    """An instance that carries the cluster's tag but is not one the applied state holds in that slot."""

    instance_id: str
    state: str
    reason: str


@dataclass(frozen=True)
class Members:
    """A cluster's live instances split by the applied state: ours (held by the state, tags matching its slot) and
    everything else that carries the cluster tag."""

    ours: tuple[Instance, ...]
    not_ours: tuple[NotOurs, ...]


@dataclass(frozen=True)
class ShutdownChange:
    changed: tuple[str, ...]  # instance ids whose shutdown behaviour was set
    not_ours: tuple[NotOurs, ...]  # carry the cluster tag, left alone


@dataclass(frozen=True)
class StartResult:
    started: tuple[str, ...]  # instance ids that were stopped and were started
    already: tuple[str, ...]  # instance ids that were running (or starting) already
    not_ours: tuple[NotOurs, ...]  # carry the cluster tag, left alone
    instance_types: tuple[str, ...] = ()  # of every instance of the state, for the cost per hour


class StartError(RuntimeError):
    """The cluster cannot be started (or did not come up); the message names the instances and the fix."""


@dataclass(frozen=True)
class Cluster:
    """One cluster as seen at ``now``."""

    name: str
    instances: tuple[Instance, ...]
    now: datetime

    @property
    def created(self) -> datetime | None:
        return min((i.launched for i in self.instances if i.launched), default=None)

    @property
    def expires(self) -> datetime | None:
        return min((i.expires for i in self.instances if i.expires), default=None)

    @property
    def bad_expiry_tags(self) -> tuple[str, ...]:
        return tuple(sorted({i.expires_tag for i in self.instances if i.expires_tag and not i.expires}))

    @property
    def running(self) -> tuple[Instance, ...]:
        return tuple(i for i in self.instances if i.state in BILLED_STATES)

    @property
    def age_seconds(self) -> float | None:
        return (self.now - self.created).total_seconds() if self.created else None

    @property
    def expired(self) -> bool:
        return self.expires is not None and self.expires <= self.now

    def cost(self) -> prices.Estimate:
        """Estimated cost per hour of the instances that are billed now (pending or running)."""
        return prices.estimate([i.instance_type for i in self.running])

    def types_text(self) -> str:
        return ", ".join(f"{n} x {t}" for t, n in sorted(Counter(i.instance_type for i in self.instances).items()))

    def states_text(self) -> str:
        counts = Counter(i.state for i in self.instances)
        return ", ".join(f"{counts[s]} {s}" for s in LIVE_STATES if counts[s])

    def expiry_text(self) -> str:
        if self.expires is None:
            return f"bad tag {self.bad_expiry_tags[0]!r}" if self.bad_expiry_tags else "never"
        if self.expired:
            return f"EXPIRED {format_duration((self.now - self.expires).total_seconds())} ago"
        return f"in {format_duration((self.expires - self.now).total_seconds())}"


# ---- reading EC2 ---------------------------------------------------------------------------------------------------
def _tags(raw: Iterable[dict[str, str]] | None) -> dict[str, str]:
    return {tag["Key"]: tag["Value"] for tag in raw or ()}


def is_ours(tags: dict[str, str]) -> bool:
    """A tfcluster instance: a valid cluster name and a task type of the contract (not just any tag)."""
    return (name_problem("cluster", tags.get(TAG_KEYS["cluster"])) is None
            and tags.get(TAG_KEYS["task_type"]) in TASK_TYPES)


def _instance(raw: dict[str, Any]) -> Instance | None:
    tags = _tags(raw.get("Tags"))
    if not is_ours(tags):
        return None
    launched = raw.get("LaunchTime")
    expires_tag = tags.get(TAG_KEYS["expires"])
    return Instance(instance_id=raw["InstanceId"], cluster=tags[TAG_KEYS["cluster"]],
                    instance_type=raw.get("InstanceType", "?"), state=raw.get("State", {}).get("Name", "?"),
                    slot=f"{tags[TAG_KEYS['task_type']]}:{tags.get(TAG_KEYS['task_index'], '0')}",
                    launched=launched.astimezone(UTC) if isinstance(launched, datetime) else None,
                    expires=parse_time(expires_tag), expires_tag=expires_tag,
                    spot=raw.get("InstanceLifecycle") == "spot")


def _described(ec2: Any, cluster: str | None) -> Iterator[dict[str, Any]]:
    """Every live instance that carries the cluster tag (the given cluster's when named), as EC2 describes it."""
    key = TAG_KEYS["cluster"]
    tag_filter = {"Name": f"tag:{key}", "Values": [cluster]} if cluster else {"Name": "tag-key", "Values": [key]}
    filters = [tag_filter, {"Name": "instance-state-name", "Values": list(LIVE_STATES)}]
    for page in ec2.get_paginator("describe_instances").paginate(Filters=filters):
        for reservation in page.get("Reservations", []):
            yield from reservation.get("Instances", [])


def instances(ec2: Any, cluster: str | None = None) -> list[Instance]:
    """Every live tfcluster instance in the client's region (of one cluster when named), in slot order."""
    found = [i for i in map(_instance, _described(ec2, cluster)) if i is not None]
    return sorted(found, key=lambda i: (i.cluster, i.slot_key))


def state_slots(hosts: Any) -> dict[str, str]:
    """{instance id: "task_type:index"} from the `hosts` output of the applied Terraform state (the module's:
    name, task_type, task_index, instance_id, ...); {} before an apply. Entries that are not a slot are dropped."""
    found: dict[str, str] = {}
    for host in hosts if isinstance(hosts, list) else []:
        if not isinstance(host, Mapping):
            continue
        instance_id, task_type, index = host.get("instance_id"), host.get("task_type"), host.get("task_index")
        if isinstance(instance_id, str) and instance_id and task_type in TASK_TYPES and \
                isinstance(index, int) and not isinstance(index, bool) and index >= 0:
            found[instance_id] = f"{task_type}:{index}"
    return found


def _slot_tag(tags: Mapping[str, str]) -> str | None:
    """The slot an instance's contract tags name ("worker:1"), or None when they name none."""
    task_type, index = tags.get(TAG_KEYS["task_type"]), tags.get(TAG_KEYS["task_index"])
    if task_type not in TASK_TYPES or index is None or not is_digits(index) or str(int(index)) != index:
        return None
    return f"{task_type}:{index}"


def why_not_ours(raw: Mapping[str, Any], cluster: str, state: StateSlots) -> str | None:
    """None when the instance is the cluster's: the state holds its id, and its tags name the cluster and the slot
    the state gives it; else why not."""
    tags = _tags(raw.get("Tags"))
    held = state.get(str(raw.get("InstanceId")))
    if held is None:
        return f"not in the Terraform state of {cluster}"
    if tags.get(TAG_KEYS["cluster"]) != cluster or not is_ours(tags):
        return f"its tfcluster tags do not name cluster {cluster} and a task type (the state holds it as {held})"
    slot = _slot_tag(tags)
    if slot is None:
        return f"its task_type/task_index tags are not a slot (the state holds it as {held})"
    if slot != held:
        return f"tagged {slot}, but the Terraform state holds it as {held}"
    return None


def members(ec2: Any, cluster: str, state: StateSlots) -> Members:
    """The cluster's live instances that are ours (by the applied state and the contract tags), and every other
    live instance carrying its tfcluster:cluster tag."""
    ours: list[Instance] = []
    not_ours: list[NotOurs] = []
    for raw in _described(ec2, cluster):
        reason = why_not_ours(raw, cluster, state)
        instance = _instance(raw) if reason is None else None
        if instance is not None:
            ours.append(instance)
        else:
            not_ours.append(NotOurs(str(raw.get("InstanceId")), raw.get("State", {}).get("Name", "?"),
                                    reason or "its tags are not a tfcluster slot"))
    return Members(tuple(sorted(ours, key=lambda i: i.slot_key)),
                   tuple(sorted(not_ours, key=lambda n: n.instance_id)))


def _group(found: Iterable[Instance], now: datetime) -> list[Cluster]:
    by_name: dict[str, list[Instance]] = {}
    for instance in found:
        by_name.setdefault(instance.cluster, []).append(instance)
    return [Cluster(name, tuple(members), now) for name, members in sorted(by_name.items())]


def _now(now: datetime | None) -> datetime:
    return (now or datetime.now(UTC)).astimezone(UTC)


def list_clusters(ec2: Any, now: datetime | None = None) -> list[Cluster]:
    """Every tfcluster cluster in the region with at least one live instance, by name, as seen at ``now``."""
    return _group(instances(ec2), _now(now))


def cluster_info(ec2: Any, cluster: str, now: datetime | None = None) -> Cluster | None:
    """One cluster, or None when no live instance carries its name."""
    found = _group(instances(ec2, cluster), _now(now))
    return found[0] if found else None


def remaining_instances(ec2: Any, cluster: str, state: StateSlots) -> Members:
    """After `make destroy`: the instances of the state (read before the destroy) that still exist (any state but
    terminated), which must be none, and what else carries the cluster tag (not ours: Terraform never touched it)."""
    return members(ec2, cluster, state)


# ---- changing EC2 --------------------------------------------------------------------------------------------------
def set_shutdown_behavior(ec2: Any, cluster: str, behavior: str, state: StateSlots) -> ShutdownChange:
    """What a host's own power-off does (stop | terminate) on every on-demand instance of the cluster that the
    applied state holds (``members``); spot instances can only terminate and are left alone, and so is anything
    else carrying the cluster tag (returned as not ours, never modified).

    Terraform manages the same attribute (``autostop_down``): provision with the same choice next time, or the
    next apply sets it back."""
    if behavior not in SHUTDOWN_BEHAVIORS:
        raise ValueError(f"shutdown behaviour {behavior!r}: use one of {', '.join(SHUTDOWN_BEHAVIORS)}")
    found = members(ec2, cluster, state)
    changed = []
    for instance in found.ours:
        if instance.spot or instance.state in ("shutting-down",):
            continue
        # The Attribute/Value form (valid for this attribute in the EC2 API; the one moto implements too).
        ec2.modify_instance_attribute(InstanceId=instance.instance_id, Attribute="instanceInitiatedShutdownBehavior",
                                      Value=behavior)
        changed.append(instance.instance_id)
    return ShutdownChange(tuple(changed), found.not_ours)


def start_instances(ec2: Any, cluster: str, state: StateSlots, *, timeout: float = 600.0, interval: float = 5.0,
                    sleep: Callable[[float], None] = time.sleep,
                    clock: Callable[[], float] = time.monotonic) -> StartResult:
    """`make start`: start every instance of the applied state that is stopped (one that is still stopping is
    started once it has stopped) and wait until all of them run. Only the state's instances whose tags name their
    slot (``members``) are touched; anything else carrying the cluster tag is left alone. An instance of the state
    that is gone (terminated: DOWN=1, spot) or terminating cannot be started: StartError with the fix."""
    deadline = clock() + timeout
    started: list[str] = []
    already: list[str] | None = None
    while True:
        found = members(ec2, cluster, state)
        states = {i.instance_id: i.state for i in found.ours}
        gone = sorted(i for i in state if states.get(i) in (None, "shutting-down"))
        if gone:
            raise StartError(f"instance(s) {', '.join(gone)} of the Terraform state of {cluster} are terminated or "
                             "terminating (DOWN=1 terminates an idle host; spot instances cannot stop), so they "
                             "cannot be started. Fix: `make provision CLUSTER=aws` launches new ones in their slots "
                             "(their disks are new: a job resumes from its S3 backups, checkpoint_s3)")
        if already is None:
            already = sorted(i for i, s in states.items() if s in ("pending", "running"))
        stopped = sorted(i for i, s in states.items() if s == "stopped")
        if stopped:
            ec2.start_instances(InstanceIds=stopped)
            started += stopped
        if all(s == "running" for s in states.values()):
            return StartResult(tuple(started), tuple(already), found.not_ours,
                               tuple(i.instance_type for i in found.ours))
        if clock() >= deadline:
            waiting = ", ".join(f"{i} ({s})" for i, s in sorted(states.items()) if s != "running")
            raise StartError(f"not running after {timeout:.0f} s: {waiting}. Fix: `make start` again waits for them "
                             "(aws ec2 describe-instance-status --instance-ids ID says why one does not start; "
                             "InsufficientInstanceCapacity: try later)")
        sleep(interval)


def start_text(cluster: str, result: StartResult, cost: str | None = None) -> str:
    """One line of what `make start` did and what it costs now (``cost``: said instead of the estimate)."""
    cost = cost or f"about {prices.estimate(list(result.instance_types)).text()} per hour"
    started = f"started {len(result.started)} instance(s): {' '.join(result.started)}" if result.started else \
        "no instance was stopped"
    already = f"; already running: {' '.join(result.already)}" if result.already else ""
    return (f"{cluster}: {started}{already}; every instance runs now, {cost}. An unfinished job "
            "resumes with `make train JOB=<job>`")


# ---- text ----------------------------------------------------------------------------------------------------------
def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(str(row[c])) for row in [header, *rows]) for c in range(len(header))]
    return ["  ".join(str(cell).ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
            for row in [header, *rows]]


def render_clusters(clusters: Sequence[Cluster], region: str | None = None, teardown: str = TEARDOWN) -> str:
    """`make clusters`: one line per cluster, the total per hour, expired clusters flagged, the price note."""
    where = f" in {region}" if region else ""
    if not clusters:
        return f"No tfcluster cluster{where} (instances tagged {TAG_KEYS['cluster']})."
    rows = [[c.name, format_duration(c.age_seconds) if c.created else "?", c.types_text(), c.states_text(),
             c.expiry_text(), c.cost().text()] for c in clusters]
    lines = _table(["CLUSTER", "AGE", "INSTANCES", "STATE", "EXPIRES", "$/HOUR (est.)"], rows)
    total = prices.estimate([i.instance_type for c in clusters for i in c.running])
    lines.append(f"{len(clusters)} cluster(s){where}; running now: about {total.text()} per hour.")
    expired = [c.name for c in clusters if c.expired]
    if expired:
        lines.append(f"EXPIRED (past their {TAG_KEYS['expires']} tag): {', '.join(expired)}. Tear down: "
                     + "; ".join(teardown.format(name=name) for name in expired))
    stopped = [c.name for c in clusters if not c.running]
    if stopped:
        lines.append(f"Stopped, volumes still billed: {', '.join(stopped)}.")
    lines.append(prices.note(region))
    return "\n".join(lines)


def summary_text(cluster: str, info: Cluster | None, region: str | None = None, teardown: str = TEARDOWN) -> str:
    """What is still there after a run, what it costs per hour, and how to tear it down."""
    where = f" in {region}" if region else ""
    down = teardown.format(name=cluster)
    if info is None:
        return f"Nothing of cluster {cluster} is left{where}."
    if not info.running:
        return (f"Cluster {cluster}{where}: {info.types_text()} ({info.states_text()}): no compute billed, the "
                f"volumes still are. Tear it down: {down}")
    expiry = f"; expires {info.expiry_text()}" if info.expires or info.bad_expiry_tags else ""
    return (f"Still running{where}: cluster {cluster}, {info.types_text()} ({info.states_text()}), about "
            f"{info.cost().text()} per hour{expiry}. Tear it down: {down}\n{prices.note(region)}")


def running_summary(ec2: Any, cluster: str, now: datetime | None = None, teardown: str = TEARDOWN) -> str:
    """The end of `make train`: what of ``cluster`` is still running, its cost per hour, the teardown command."""
    return summary_text(cluster, cluster_info(ec2, cluster, now), _region(ec2), teardown)


def render_not_ours(cluster: str, not_ours: Sequence[NotOurs]) -> list[str]:
    """The instances that carry the cluster tag but are not the state's: named, never touched; [] when none."""
    if not not_ours:
        return []
    return [f"{len(not_ours)} instance(s) tagged {TAG_KEYS['cluster']}={cluster} are not ours, left alone "
            "(not modified):",
            *(f"  {n.instance_id}  {n.state}  {n.reason}" for n in not_ours),
            f"Fix: nothing to do if they belong to someone else; if one is a host of {cluster} that Terraform lost "
            f"track of, terminate it yourself (aws ec2 terminate-instances --instance-ids ID), or remove its "
            f"{TAG_KEYS['cluster']} tag so it stops being listed here."]


def render_remaining(cluster: str, remaining: Members, region: str | None = None) -> str:
    """`make destroy`: the check through the EC2 API, in one line (or one line per instance left), then what
    carries the cluster tag without being the state's."""
    where = f" in {region}" if region else ""
    others = render_not_ours(cluster, remaining.not_ours)
    if not remaining.ours:
        head = (f"0 instances of the Terraform state of {cluster} remain{where} (checked through the EC2 API)."
                if others else
                f"0 instances tagged {TAG_KEYS['cluster']}={cluster} remain{where} (checked through the EC2 API).")
        return "\n".join([head, *others])
    left = "\n".join(f"  {i.instance_id}  {i.instance_type}  {i.state}  {i.slot}" for i in remaining.ours)
    ids = " ".join(i.instance_id for i in remaining.ours)
    return "\n".join([f"{len(remaining.ours)} instance(s) of the Terraform state of {cluster} remain{where}:\n{left}\n"
                      f"Fix: run the destroy again; if Terraform no longer knows them, terminate them: aws ec2 "
                      f"terminate-instances --instance-ids {ids}", *others])


def _region(ec2: Any) -> str | None:
    meta = getattr(ec2, "meta", None)
    return getattr(meta, "region_name", None)


def clusters_report(ec2: Any, now: datetime | None = None, teardown: str = TEARDOWN) -> str:
    """`make clusters` in one call."""
    return render_clusters(list_clusters(ec2, now), _region(ec2), teardown)
