"""The Slurm kind's transport: everything CLUSTER=slurm does on the cluster, over SSH to its login node.

    preflight(request)   reachable? the partition, its nodes, CPUs and GPUs; the shared dir; a job already queued
    stage(request)       release, datasets (and a built venv) onto the shared directory by content digest
    submit(staged)       the spec and batch script, then sbatch (or re-attach to the job queued under its name)
    poll(record)         the scheduler's view and every task's status: {key: {"status": ...}} for wait.decide
    stop()               scancel every queued or running job of the job's name
    follow(record, ...)  the chief's (or a slot's) log until the job ends
    collect(record, dest) the chief's model dir, sha256-verified, versioned behind current (tfcluster.collect)

Every command on the login node is a list of words (quoted here, never a template), one SSH connection each
(multiplexed: ControlMaster), checked host key (the cluster file's ``host_keys``). Whatever the login node answers is
data: read bounded (:func:`run_bounded`), parsed and checked here, printed by the caller through
tfcluster.core.text; a poll that is not the expected shape becomes a failed, named task in the wait's decision.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import selectors
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfcluster.core import contract, slurm
from tfcluster.core.contract import Problem
from tfcluster.core.files import atomic_write_text
from tfcluster.core.paths import CACHE
from tfcluster.core.sshkeys import known_hosts_line
from tfcluster.core.text import PrintableWriter, printable
from tfcluster.kinds import slurm_guard as guard
from tfcluster.kinds.base import JobRequest, KindError, Target
from tfcluster.kinds.slurm_file import (
    ClusterFile,
    Layout,
    Submission,
    job_name,
    job_spec,
    render_sbatch,
)
from tfcluster.run.reach import Reach

STDOUT_LIMIT = 1 << 20  # bytes of one answer kept (a poll of thousands of tasks stays far below)
STDERR_LIMIT = 64 * 1024
SSH_TIMEOUT = 10  # ConnectTimeout
COMMAND_TIMEOUT = 60.0
UPLOAD_TIMEOUT = 1800.0
BUILD_TIMEOUT = 3600.0
SSH_UNREACHABLE = 255
ACTIVE_STATES = "PENDING,RUNNING,CONFIGURING,COMPLETING,SUSPENDED,REQUEUED,REQUEUE_HOLD,REQUEUE_FED,RESIZING,SIGNALING"
OPTIONAL_FILES = (contract.STATUS, contract.CONFIG, contract.METRICS)  # the collector role's defaults
RECORD = "slurm.json"  # artifacts/slurm/<job>/slurm.json: the submitted job, for status/logs/stop/collect

# Unpack a content-addressed tree from stdin into DEST/NAME, verified against its digest, atomically; a tree that is
# already there is kept (and stdin read away). $1 DEST, $2 NAME, $3 the python, $4 PYTHONPATH for the digest check.
STAGE_SCRIPT = guard.GUARD + r"""set -eu
dest=$1 name=$2 py=$3 path=$4
if [ -d "$dest/$name" ]; then cat >/dev/null; mine "$dest/$name"; echo present; exit 0; fi
mkdir -p "$dest"
tmp=$(mktemp -d "$dest/.incoming-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
tar -xzf - -C "$tmp" --no-same-owner --no-same-permissions
got=$(cd "$tmp" && PYTHONPATH="${path:-$tmp}" "$py" -c \
  'import sys; from tfcluster.core.files import tree_digest; print(tree_digest("."))')
[ "$got" = "$name" ] || { echo "content digest $got, not $name" >&2; exit 3; }
chmod -R u+rwX,go-rwx "$tmp"
mv -T "$tmp" "$dest/$name" 2>/dev/null || [ -d "$dest/$name" ]
mine "$dest/$name"
trap - EXIT
echo copied
"""
# Write the job's files (a tar on stdin) into its directory, each only when it is not there (content-addressed).
FILES_SCRIPT = guard.GUARD + r"""set -eu
dir=$1
if [ -e "$dir" ]; then mine "$dir"; fi
mkdir -p "$dir/logs" "$dir/run" "$dir/tasks"
tmp=$(mktemp -d "$dir/.incoming-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
tar -xf - -C "$tmp" --no-same-owner --no-same-permissions
for f in "$tmp"/*; do [ -e "$dir/${f##*/}" ] || mv "$f" "$dir/"; done
echo written
"""
# Submit unless a job of this name is queued or running already (then re-attach to it), and record the submitted
# job beside the job's files. $1 name $2 script $3 record file $4 active states $5/$6 the record's JSON around the id
SUBMIT_SCRIPT = r"""set -eu
name=$1 script=$2 record=$3 states=$4 head=$5 tail=$6
active=$(squeue -h -u "$(id -un)" -n "$name" -t "$states" -o %i | sort -n | tail -1)
if [ -n "$active" ]; then echo "attach $active"; exit 0; fi
out=$(sbatch --parsable "$script")
id=${out%%;*}
printf '%s%s%s\n' "$head" "$id" "$tail" > "$record.tmp"
mv "$record.tmp" "$record"
echo "submitted $id"
"""
# Build a venv from a hash-pinned lock (and a wheelhouse) into DEST, atomically (tasks run `python -m`, so a moved
# venv's console-script shebangs do not matter). $1 DEST $2 LOCK $3 WHEELHOUSE ('' none) $4 the python
BUILD_SCRIPT = guard.GUARD + r"""set -eu
dest=$1 lock=$2 wheels=$3 py=$4
if [ -e "$dest" ]; then mine "$dest"; fi
if [ -x "$dest/bin/python" ]; then echo present; exit 0; fi
mkdir -p "$(dirname "$dest")"
tmp=$(mktemp -d "$dest.incoming-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
"$py" -m venv "$tmp"
set -- --quiet --disable-pip-version-check --require-hashes --only-binary :all: --no-deps -r "$lock"
if [ -n "$wheels" ]; then set -- "$@" --no-index --find-links "$wheels"; fi
"$tmp/bin/python" -m pip install "$@"
chmod -R u+rwX,go-rwx "$tmp"
mv -T "$tmp" "$dest" 2>/dev/null || [ -x "$dest/bin/python" ]
mine "$dest"
trap - EXIT
echo built
"""
# Cancel the login user's queued or running jobs of this name. $1 name $2 active states
STOP_SCRIPT = r"""set -eu
ids=$(squeue -h -u "$(id -un)" -n "$1" -t "$2" -o %i | tr '\n' ' ')
if [ -z "${ids% }" ]; then echo none; exit 0; fi
scancel $ids
echo cancelled $ids
"""
PREFLIGHT_SCRIPT = r"""part=$1 name=$2 shared=$3 py=$4 tool=$5 submitted=$6 states=$7
echo "@@partition"; scontrol -o show partition "$part" 2>&1; echo "@@rc $?"
echo "@@partitions"; sinfo -h -o %P 2>&1 | head -200
echo "@@nodes"; sinfo -h -p "$part" -o '%D|%c|%G' 2>&1 | head -200
echo "@@active"; squeue -h -u "$(id -un)" -n "$name" -t "$states" -o '%i|%T' 2>&1 | head -20
echo "@@shared"; if [ -d "$shared" ] && [ -w "$shared" ]; then echo ok; else echo missing; fi
echo "@@python"; if [ -z "$py" ] || [ -x "$py" ]; then echo ok; else echo missing; fi
echo "@@tool"; "$tool" -c 'import sys; print("ok" if sys.version_info >= (3, 8) else "old")' 2>&1 | head -3
echo "@@submitted"; head -c 65536 "$submitted" 2>/dev/null; echo
""" + guard.PREFLIGHT_SHARED + 'echo "@@end"\n'


class LoginError(KindError):
    """The login node cannot be used; the message names the field of the cluster file and the fix."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        # Their messages quote the login node's answers: escaped here, wherever they are printed.
        self.problems = tuple(Problem(p.field, printable(p.message, 1000), p.fix) for p in problems)
        super().__init__("\n".join(str(p) for p in self.problems))


@dataclass(frozen=True)
class Answer:
    code: int
    out: str
    err: str
    over: bool = False


def run_bounded(argv: Sequence[str], *, timeout: float, stdin: Any = None, limit: int = STDOUT_LIMIT) -> Answer:
    """Run ``argv``: at most ``limit`` bytes of stdout and STDERR_LIMIT of stderr are kept (the rest is read and
    dropped: the command never blocks on a full pipe), decoded with U+FFFD for a bad byte; killed after ``timeout``
    (code 124)."""
    proc = subprocess.Popen(list(argv), stdin=stdin if stdin is not None else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    kept = {proc.stdout: bytearray(), proc.stderr: bytearray()}
    limits = {proc.stdout: limit, proc.stderr: STDERR_LIMIT}
    over, deadline = False, time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        for pipe in kept:
            selector.register(pipe, selectors.EVENT_READ)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                proc.kill()
                proc.wait()
                return Answer(124, kept[proc.stdout].decode("utf-8", "replace"), "timed out", over)
            for key, _ in selector.select(left):
                chunk = os.read(key.fd, 64 * 1024)
                if not chunk:
                    selector.unregister(key.fileobj)
                    continue
                buffer = kept[key.fileobj]  # type: ignore[index]
                room = max(0, limits[key.fileobj] - len(buffer))  # type: ignore[index]
                buffer += chunk[:room]
                over = over or (key.fileobj is proc.stdout and len(chunk) > room)
    code = proc.wait()
    return Answer(code, kept[proc.stdout].decode("utf-8", "replace"), kept[proc.stderr].decode("utf-8", "replace"),
                  over)


def sections(text: str) -> dict[str, list[str]]:
    """The ``@@name`` sections of the preflight's answer."""
    found: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("@@"):
            current, _, rest = line[2:].partition(" ")
            found.setdefault(current, [])
            if rest.strip():  # "@@rc 0"
                found[current].append(rest.strip())
        elif current is not None:
            found[current].append(line)
    return found


def _gpus(gres: str) -> int:
    """GPUs per node in an sinfo %G field (``gpu:4``, ``gpu:a100:8(S:0-1)``, ``(null)``)."""
    total = 0
    for item in gres.split(","):
        parts = item.split("(")[0].split(":")
        if parts[0] == "gpu" and len(parts) >= 2 and contract.is_digits(parts[-1]):
            total += int(parts[-1])
    return total


def preflight_problems(cf: ClusterFile, found: Mapping[str, list[str]]) -> list[Problem]:
    """What the login node says against the cluster file: the partition exists and can hold the allocation, the
    shared dir and the venv are there, the login node's python3 runs tfcluster's tools."""
    where = str(cf.path)
    problems: list[Problem] = []
    partition = " ".join(found.get("partition", []))
    if (found.get("rc") or ["1"])[0] != "0" or "PartitionName=" not in partition:
        names = sorted({line.strip().rstrip("*") for line in found.get("partitions", []) if line.strip()})
        return [Problem(f"{where}: partition", f"{cf.partition!r} is not a partition of this cluster",
                        f"use one of {', '.join(names[:20]) or '(sinfo lists none)'}")]
    fields = dict(part.split("=", 1) for part in partition.split() if "=" in part)
    total = fields.get("TotalNodes", "")
    if contract.is_digits(total) and cf.nodes > int(total):
        problems.append(Problem(f"{where}: nodes", f"{cf.nodes} nodes asked, partition {cf.partition} has {total}",
                                f"ask for at most {total} nodes, or use a bigger partition"))
    rows = [line.split("|") for line in found.get("nodes", []) if line.count("|") == 2]
    cpus = [int(row[1]) for row in rows if contract.is_digits(row[1])]
    per_task = max(cf.cpus_per_task, 1)
    if cpus and cf.tasks_per_node * per_task > min(cpus):
        problems.append(Problem(f"{where}: tasks_per_node", f"{cf.tasks_per_node} task(s) x {per_task} CPU(s) do "
                                f"not fit on a node of {cf.partition} ({min(cpus)} CPUs)",
                                "run fewer tasks per node, or fewer CPUs per task"))
    gpus = [_gpus(row[2]) for row in rows]
    if cf.gpus_per_node and (not gpus or cf.gpus_per_node > min(gpus)):
        problems.append(Problem(f"{where}: gpus_per_node", f"{cf.gpus_per_node} GPUs asked, the nodes of "
                                f"{cf.partition} have {min(gpus) if gpus else 0}",
                                "ask for at most that many, or use a GPU partition (gres.conf: make slurm-up)"))
    if found.get("shared", [""])[0:1] != ["ok"]:
        problems.append(Problem(f"{where}: shared_dir", f"{cf.shared_dir} is not a writable directory on the "
                                "login node", "create it on the shared filesystem every node mounts (or fix its "
                                "permissions)"))
    else:
        problems += guard.shared_dir_problems(where, found.get("uid", []), found.get("dirs", []),
                                              found.get("foreign", []))
    if found.get("python", [""])[0:1] != ["ok"]:
        problems.append(Problem(f"{where}: python.venv", f"{cf.python.venv}/bin/python does not exist on the login "
                                "node", "create the venv on the shared filesystem, or use python: {build: cpu}"))
    if found.get("tool", [""])[0:1] != ["ok"]:
        problems.append(Problem(f"{where}: login.python", f"{cf.login.python} on the login node is not a Python "
                                ">= 3.8", "install python3 there, or name it in login.python"))
    return problems


@dataclass(frozen=True)
class Record:
    """The submitted job (artifacts/slurm/<job>/slurm.json and <job dir>/submitted.json)."""

    job_id: str
    spec: str
    release: str
    chief_slot: str  # the chief's slot (chief-0, or worker-0 without a chief): whose model dir is collected

    def to_json(self) -> str:
        return json.dumps({"job_id": self.job_id, "spec": self.spec, "release": self.release,
                           "chief_slot": self.chief_slot}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Record | None:
        try:
            data = json.loads(text)
        except ValueError:
            return None
        if not isinstance(data, dict) or not contract.is_digits(str(data.get("job_id", ""))):
            return None
        values = {key: str(data.get(key) or "") for key in ("spec", "release", "chief_slot")}
        return cls(job_id=str(data["job_id"]), **values)


@dataclass(frozen=True)
class Staged:
    """What stage() put on the shared directory, and the submission it makes."""

    submission: Submission
    copied: tuple[str, ...]  # what was copied now (empty: everything was there)
    chief: str


def default_datasets(request: JobRequest) -> tuple[str, ...]:
    """The built-in trainer's MNIST unless it reads --data s3://... or a synthetic/tfrecord dataset; a SCRIPT job
    only the DATASETS it names (the host_ready role's rule)."""
    if request.datasets:
        return tuple(request.datasets)
    args = " ".join(request.trainer_args)
    if request.script is not None or any(word in args for word in ("--data s3://", "--data=s3://",
                                                                   "--dataset synthetic", "--dataset=synthetic",
                                                                   "--dataset tfrecord", "--dataset=tfrecord")):
        return ()
    return ("mnist",)


def program_of(request: JobRequest) -> dict[str, Any]:
    """The program every task runs: the trainer with its arguments, or the user's script (a file or package)."""
    if request.script is None:
        args = (["--strategy", request.strategy] if request.strategy != "auto" else []) + \
               (["--epochs", str(request.epochs)] if request.epochs is not None else []) + list(request.trainer_args)
        return {"args": args}
    key = "script" if request.script.suffix == ".py" else "package"
    return {key: request.script.name, "args": list(request.script_args)}


def tree_digest_of(files: Mapping[str, str]) -> str:
    """tfcluster.core.files.tree_digest of a directory holding ``{name: sha256}`` (without building it)."""
    digest = hashlib.sha256()
    for rel in sorted(files):
        digest.update(f"{rel}\0{files[rel]}\n".encode())
    return digest.hexdigest()


def key_of(node: Any, local_id: Any, slot: str, nodes_unique: bool) -> str:
    """The name of a task in the view and the decision: its node (``node10``), ``node10:1`` when a node runs more
    tasks, or its slot before the scheduler placed it."""
    if not isinstance(node, str) or not node or contract.name_problem("host", node):
        return slot
    return node if nodes_unique else f"{node}:{local_id}"


def first_failure_first(polls: Mapping[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The polls in slot order, but the task that failed first in front: when one task dies, its peers fail too
    (their collectives lose it) before srun's --kill-on-bad-exit reaches them, and the wait's decision names the
    first failure it meets."""
    def ended(item: tuple[str, dict[str, Any]]) -> float:
        status = item[1].get("status")
        at = status.get("ended_at") if isinstance(status, dict) and status.get("state") == contract.FAILED else None
        return float(at) if isinstance(at, (int, float)) and not isinstance(at, bool) else float("inf")

    first = min(polls.items(), key=ended, default=None)
    if first is None or ended(first) == float("inf"):
        return dict(polls)
    return {first[0]: first[1], **{key: value for key, value in polls.items() if key != first[0]}}


class SlurmTransport:
    """CLUSTER=slurm's commands through the login node (see the module docstring)."""

    def __init__(self, cf: ClusterFile, cluster_name: str, target: Target) -> None:
        self.cf = cf
        self.cluster_name = cluster_name
        self.target = target
        self.log: list[str] = []  # every command and its answer's size, for the command's log file

    # --- reaching the login node ------------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.cf.login.host

    def known_hosts(self) -> Path | None:
        """The login node's keys (the cluster file's host_keys) in a file of its own; None: the user's own."""
        if not self.cf.login.host_keys:
            return None
        path = CACHE / "tfcluster" / "known_hosts" / f"slurm-{self.cluster_name}"
        port = None if self.cf.login.port == 22 else self.cf.login.port
        text = "".join(known_hosts_line(self.cf.login.host, port, key, "login.host_keys") + "\n"
                       for key in self.cf.login.host_keys)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, text, mode=0o600)
        return path

    def reach(self) -> Reach:
        control = CACHE / "tfcluster" / "ssh"
        control.mkdir(parents=True, exist_ok=True, mode=0o700)
        args = [f"-o ConnectTimeout={SSH_TIMEOUT}", "-o ControlMaster=auto", f"-o ControlPath={control}/%C",
                "-o ControlPersist=120", "-o ServerAliveInterval=15"]
        known = self.known_hosts()
        if known is not None:
            args += [f"-o UserKnownHostsFile={known}", "-o StrictHostKeyChecking=yes"]
        return Reach(name=self.name, connection="ssh", host=self.cf.login.host, port=self.cf.login.port,
                     user=self.cf.login.user, ssh_common_args=" ".join(args),
                     private_key_file=str(self.cf.login.identity_file) if self.cf.login.identity_file else None)

    def reach_info(self) -> dict[str, Any]:
        """The login node's connection as tfcluster.collect.ssh.pull takes it."""
        reach = self.reach()
        return {"connection": "ssh", "host": reach.host, "port": reach.port, "user": reach.user,
                "private_key_file": reach.private_key_file, "ssh_common_args": reach.ssh_common_args,
                "host_key_checking": True, "become": False}

    def ssh(self, words: Sequence[str], *, timeout: float = COMMAND_TIMEOUT, stdin: Any = None,
            limit: int = STDOUT_LIMIT) -> Answer:
        """Run ``words`` on the login node; LoginError when SSH itself fails (exit 255: the node cannot be
        reached, or its key does not match)."""
        started = time.monotonic()
        answer = run_bounded(self.reach().argv(guard.remote(words)), timeout=timeout, stdin=stdin, limit=limit)
        shown = [f"<{words[3]} script>", *words[4:8]] if list(words[:2]) == ["sh", "-c"] else list(words[:8])
        self.log.append(f"login {self.name}: {' '.join(shown)}{' ...' if len(words) > 8 else ''}: exit "
                        f"{answer.code} in {time.monotonic() - started:.1f} s")
        if answer.code == SSH_UNREACHABLE:
            raise LoginError([Problem(f"{self.cf.path}: login.host", f"cannot reach {self.cf.login.user}@"
                                      f"{self.cf.login.host}:{self.cf.login.port} over SSH "
                                      f"({answer.err.strip()[-300:] or 'ssh exited 255'})",
                                      "check login.host, login.user, login.port, login.host_keys and your key "
                                      "(login.identity_file)")])
        if answer.code == 124:
            raise LoginError([Problem(f"{self.cf.path}: login.host", f"{self.name} did not answer within "
                                      f"{timeout:.0f} s", "check the login node's load and network")])
        return answer

    def tool(self, release: str, *args: str) -> list[str]:
        """``python3 -m tfcluster.host.slurm_task ARGS`` from the staged release, on the login node (slurm_guard)."""
        return ["sh", "-c", guard.TOOL_SCRIPT, "tool", release, f"{self.cf.shared_dir}/{guard.PYCACHE}",
                self.cf.login.python, *args]

    @property
    def layout(self) -> Layout:
        return Layout(self.cf.shared_dir, self.cluster_name, self.target.job)

    # --- preflight, stage, submit -----------------------------------------------------------------------------------
    def preflight(self) -> Record | None:
        """LoginError with every problem the login node shows (nothing is submitted); else the record of a job of
        this name that is queued or running already (a second `make train` re-attaches to it), or None."""
        python = self.cf.python.interpreter(self.cf.shared_dir) if self.cf.python.venv else ""
        answer = self.ssh(["sh", "-c", PREFLIGHT_SCRIPT, "preflight", self.cf.partition,
                           job_name(self.cluster_name, self.target.job), self.cf.shared_dir, python,
                           self.cf.login.python, self.layout.submitted, ACTIVE_STATES])
        found = sections(answer.out)
        if "end" not in found:
            raise LoginError([Problem(f"{self.cf.path}: login.host", f"{self.name} gave no usable answer (exit "
                                      f"{answer.code}: {answer.err.strip()[-200:]})", "check the login shell")])
        problems = preflight_problems(self.cf, found)
        if problems:
            raise LoginError(problems)
        active = [line.split("|")[0] for line in found.get("active", []) if contract.is_digits(line.split("|")[0])]
        if not active:
            return None
        record = self.checked(Record.from_json("\n".join(found.get("submitted", []))), self.layout.submitted)
        job_id = max(active, key=int)
        if record is None or record.job_id != job_id:
            raise LoginError([Problem("JOB", f"Slurm job {job_id} named {job_name(self.cluster_name, self.target.job)}"
                                      " is queued or running, but was not submitted from this job's directory",
                                      f"wait for it, or cancel it (scancel {job_id}; make stop CLUSTER=slurm)")])
        return record

    def stage(self, request: JobRequest) -> Staged:
        """Copy what the job needs onto the shared directory, by content digest (what is there is not copied)."""
        from tfcluster.prepare import release

        stage_dir = CACHE / "tfcluster" / "stage"
        sources = release.release_sources(release.REPO, str(request.script or ""),
                                          str(request.script_requirements or ""))
        staged = release.stage(stage_dir, sources)
        names = default_datasets(request)
        data = release.datasets(names, stage_dir / "verified-datasets.json", verify=bool(names),
                                source=CACHE / "datasets") if names else {}
        data_digest = tree_digest_of({d["file"]: d["sha256"] for d in data.values()}) if data else ""
        layout = self.layout
        copied: list[str] = []
        if self._upload_tree(Path(staged["archive"]), layout.release(""), staged["digest"], ""):
            copied.append(f"release {staged['digest'][:12]}")
        if data and self._upload_datasets(data, layout, data_digest, layout.release(staged["digest"])):
            copied.append(f"datasets {', '.join(data)}")
        venv = ""
        if self.cf.python.build:
            venv, built = self._build_venv(request, layout, layout.release(staged["digest"]))
            copied += [f"venv {venv[:12]} built from the {self.cf.python.build} lock"] if built else []
        legacy = request.script is None or request.script_keras == "legacy"
        spec = job_spec(self.cf, job=request.job, layout=layout, release=staged["digest"], datasets=data_digest,
                        strategy=request.strategy, program=program_of(request), legacy_keras=legacy,
                        max_duration=request.max_duration)
        sub = Submission(cluster=self.cf, cluster_name=self.cluster_name, job=request.job, release=staged["digest"],
                         spec=spec, datasets=data_digest, venv=venv, max_duration=request.max_duration)
        slots = slurm.declared_slots(self.cf.tasks)
        chief_type, chief_index = contract.chief_of({t: [i] for t, i in slots})
        return Staged(submission=sub, copied=tuple(copied), chief=f"{chief_type}-{chief_index}")

    def _upload_tree(self, archive: Path, dest: str, digest: str, pythonpath: str) -> bool:
        """True when the tree was copied now; False when it was there."""
        with open(archive, "rb") as handle:
            answer = self.ssh(["sh", "-c", STAGE_SCRIPT, "stage", dest.rstrip("/"), digest, self.cf.login.python,
                               pythonpath], stdin=handle, timeout=UPLOAD_TIMEOUT)
        if answer.code != 0:
            raise LoginError([Problem(f"{self.cf.path}: shared_dir", f"copying {digest[:12]} to {dest} on "
                                      f"{self.name} failed (exit {answer.code}: {answer.err.strip()[-300:]})",
                                      "check the shared directory's space and permissions")])
        return answer.out.strip().endswith("copied")

    def _upload_datasets(self, data: Mapping[str, Mapping[str, Any]], layout: Layout, digest: str,
                         release_dir: str) -> bool:
        with tempfile.TemporaryDirectory(prefix="tfcluster-datasets-") as tmp:
            archive = Path(tmp) / "datasets.tar.gz"
            with tarfile.open(archive, "w:gz") as tar:
                for item in data.values():
                    tar.add(item["src"], arcname=item["file"])
            return self._upload_tree(archive, layout.datasets("").rstrip("/"), digest, release_dir)

    def _build_venv(self, request: JobRequest, layout: Layout, release_dir: str) -> tuple[str, bool]:
        """python: {build: cpu|gpu}: a venv on the shared directory by the hash-pinned lock's sha256, built on the
        login node from the lock (and WHEELHOUSE, when it is a directory) unless it is there. (digest, built now)."""
        from tfcluster.prepare import lock, release

        lock_file = lock.GPU_LOCK if self.cf.python.build == "gpu" else lock.CPU_LOCK
        digest = hashlib.sha256(lock_file.read_bytes()).hexdigest()
        if self.ssh(["sh", "-c", guard.GUARD + 'mine "$1" && [ -x "$1/bin/python" ]', "venv", layout.venv(digest)],
                    timeout=BUILD_TIMEOUT).code == 0:
            return digest, False
        with tempfile.TemporaryDirectory(prefix="tfcluster-lock-") as tmp:
            tree = Path(tmp) / "tree"
            tree.mkdir()
            (tree / "requirements.lock").write_bytes(lock_file.read_bytes())
            staged = release.stage(Path(tmp) / "out", [("", tree)])
            self._upload_tree(Path(staged["archive"]), f"{self.cf.shared_dir}/locks", staged["digest"], release_dir)
            lock_path = f"{self.cf.shared_dir}/locks/{staged['digest']}/requirements.lock"
        wheels = ""
        if request.wheelhouse is not None and request.wheelhouse.is_dir():
            with tempfile.TemporaryDirectory(prefix="tfcluster-wheels-") as tmp:
                staged = release.stage(Path(tmp), [("", request.wheelhouse)])
                self._upload_tree(Path(staged["archive"]), f"{self.cf.shared_dir}/wheelhouse", staged["digest"],
                                  release_dir)
                wheels = f"{self.cf.shared_dir}/wheelhouse/{staged['digest']}"
        answer = self.ssh(["sh", "-c", BUILD_SCRIPT, "build", layout.venv(digest), lock_path, wheels,
                           self.cf.login.python], timeout=BUILD_TIMEOUT, limit=STDERR_LIMIT)
        if answer.code != 0:
            raise LoginError([Problem(f"{self.cf.path}: python.build", f"building the venv on {self.name} failed "
                                      f"(exit {answer.code}: {answer.err.strip()[-400:]})",
                                      "give WHEELHOUSE= (make wheelhouse) when the login node has no index, or use "
                                      "python: {venv: ...}")])
        return digest, True

    def submit(self, staged: Staged) -> tuple[Record, bool]:
        """Write the job's spec and batch script (content-addressed) and sbatch it, unless a job of this name is
        queued or running (then that one: re-attached). (record, submitted now)."""
        sub = staged.submission
        script = sub.script_path
        files = {Path(sub.spec_path).name: json.dumps(sub.spec, indent=2, sort_keys=True) + "\n",
                 Path(script).name: render_sbatch(sub)}
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            for name, text in files.items():
                data = text.encode()
                info = tarfile.TarInfo(name)
                info.size, info.mode = len(data), 0o600
                tar.addfile(info, io.BytesIO(data))
        with tempfile.TemporaryFile() as handle:
            handle.write(buffer.getvalue())
            handle.seek(0)
            answer = self.ssh(["sh", "-c", FILES_SCRIPT, "files", sub.layout.job_dir], stdin=handle)
        if answer.code != 0:
            raise LoginError([Problem(f"{self.cf.path}: shared_dir", f"writing the job's files in "
                                      f"{sub.layout.job_dir} failed ({answer.err.strip()[-300:]})",
                                      "check the shared directory's permissions")])
        record = Record(job_id="0", spec=sub.spec_path, release=sub.layout.release(sub.release),
                        chief_slot=staged.chief)
        head, tail = record.to_json().split('"0"')  # the submitted id goes between them
        answer = self.ssh(["sh", "-c", SUBMIT_SCRIPT, "submit", job_name(self.cluster_name, sub.job), script,
                           sub.layout.submitted, ACTIVE_STATES, head + '"', '"' + tail])
        words = answer.out.split()
        if answer.code != 0 or len(words) < 2 or words[-2] not in ("attach", "submitted") or \
                not contract.is_digits(words[-1]):
            raise LoginError([Problem(f"{self.cf.path}: partition", "sbatch refused the job "
                                      f"({(answer.err or answer.out).strip()[-400:]})",
                                      "check partition, account, qos and the allocation against `sinfo`")])
        if words[-2] == "attach":  # queued meanwhile by another train: its own record
            attached = self.submitted()
            if attached is None or attached.job_id != words[-1]:
                raise LoginError([Problem("JOB", f"Slurm job {words[-1]} of this name was queued meanwhile from "
                                          "elsewhere", f"wait for it, or cancel it (scancel {words[-1]})")])
            return attached, False
        return Record(job_id=words[-1], spec=record.spec, release=record.release, chief_slot=record.chief_slot), True

    def submitted(self) -> Record | None:
        """The job last submitted from this job's directory (its submitted.json on the shared directory)."""
        answer = self.ssh(["head", "-c", "65536", self.layout.submitted], limit=65536)
        return self.checked(Record.from_json(answer.out), self.layout.submitted) if answer.code == 0 else None

    def checked(self, record: Record | None, source: str) -> Record | None:
        """``record`` (read from ``source``) when its paths and chief are the layout's; else LoginError."""
        slots = [f"{t}-{i}" for t, i in slurm.declared_slots(self.cf.tasks)]
        problems = [] if record is None else guard.record_problems(
            source, release=record.release, spec=record.spec, chief_slot=record.chief_slot,
            shared_dir=self.cf.shared_dir, job_dir=self.layout.job_dir, slots=slots)
        if problems:
            raise LoginError(problems)
        return record

    # --- watch ------------------------------------------------------------------------------------------------------
    def poll(self, record: Record, lines: int = 20) -> tuple[dict[str, Any], dict[str, dict[str, Any]],
                                                             dict[str, str]]:
        """(scheduler view, {task: {"status": ...} or {"error": ..., "unreachable": bool}}, {task: slot}), tasks in
        slot order, named by node (:func:`key_of`). An answer of the wrong shape makes every task unreadable."""
        slots = [f"{t}-{i}" for t, i in slurm.declared_slots(self.cf.tasks)]
        try:
            answer = self.ssh(self.tool(record.release, "poll", record.spec, "--job-id", record.job_id, "--lines",
                                        str(lines)))
        except LoginError as exc:
            error = {"error": str(exc.problems[0].message), "unreachable": True}
            return {"phase": "unknown", "state": "", "reason": "login node unreachable"}, \
                {slot: dict(error) for slot in slots}, {slot: slot for slot in slots}
        doc = _json_object(answer.out) if answer.code == 0 and not answer.over else None
        scheduler = doc.get("scheduler") if doc else None
        tasks = doc.get("tasks") if doc else None
        if not isinstance(scheduler, dict) or not isinstance(tasks, dict):
            why = "over 1 MiB" if answer.over else (answer.err.strip()[-200:] or answer.out.strip()[-200:] or
                                                    f"exit {answer.code}")
            error = {"error": f"the login node's poll is not a job status ({why})"}
            return {"phase": "unknown", "state": "", "reason": "unreadable poll"}, \
                {slot: dict(error) for slot in slots}, {slot: slot for slot in slots}
        nodes = [t.get("node") for t in tasks.values() if isinstance(t, dict)]
        unique = len(set(nodes)) == len(nodes)
        polls: dict[str, dict[str, Any]] = {}
        names: dict[str, str] = {}
        for slot in slots:
            status = tasks.get(slot)
            node = status.get("node") if isinstance(status, dict) else None
            local = status.get("local_id") if isinstance(status, dict) else None
            key = key_of(node, local, slot, unique)
            key = key if key not in polls else slot
            polls[key] = {"status": status} if status is not None else {"error": f"no status of {slot}"}
            names[key] = slot
        return scheduler, first_failure_first(polls), names

    def stop(self) -> list[str]:
        """scancel every queued or running job of this name (of the login user); the ids cancelled ([]: none)."""
        answer = self.ssh(["sh", "-c", STOP_SCRIPT, "stop", job_name(self.cluster_name, self.target.job),
                           ACTIVE_STATES])
        words = answer.out.split()
        if answer.code != 0 or not words or words[0] not in ("none", "cancelled"):
            raise LoginError([Problem("JOB", f"scancel on {self.name} failed ({answer.err.strip()[-300:]})",
                                      "cancel it there: scancel -n " + job_name(self.cluster_name, self.target.job))])
        return [word for word in words[1:] if contract.is_digits(word)]

    def follow_argv(self, record: Record, slot: str | None) -> list[str]:
        words = self.tool(record.release, "logs", record.spec, "--job-id", record.job_id, "--follow")
        return self.reach().argv(guard.remote(words + (["--slot", slot] if slot else [])))

    def follow(self, record: Record, slot: str | None, out: Any) -> int:
        from tfcluster.run.follow import FOLLOW_LINE_LIMIT, stream

        shown = PrintableWriter(out, FOLLOW_LINE_LIMIT)
        try:
            return stream(self.name, self.follow_argv(record, slot), shown)
        finally:
            shown.close()

    # --- collect ----------------------------------------------------------------------------------------------------
    def collect(self, record: Record, dest: Path) -> dict[str, Any]:
        """The chief's model dir from the shared directory through the login node, by tfcluster.collect's rules:
        the names come from here (the manifest's entries, MANIFEST, DONE, the optional names), sizes from there."""
        from tfcluster.collect.ssh import pull
        from tfcluster.collect.transfer import CollectError

        model_dir = self.layout.chief_dir(record.chief_slot or "chief-0")
        answer = self.ssh(self.tool(record.release, "manifest", model_dir, "--optional", *OPTIONAL_FILES))
        described = _json_object(answer.out) if not answer.over else None
        if not described or described.get("error") or not isinstance(described.get("done"), bool):
            why = (described or {}).get("error") or answer.err.strip()[-300:] or f"exit {answer.code}"
            raise CollectError(f"reading {model_dir} on {self.name} failed: {why}")
        if not described["done"]:
            raise CollectError(f"{model_dir} on {self.name} has no {contract.DONE}: the job has not finished. Fix: "
                               "`make status CLUSTER=slurm`, or train it again (it resumes from its backups)")
        request = {"manifest": described.get("manifest"), "dest": str(dest), "name": self.name,
                   "files": described.get("files"), "optional": described.get("optional"),
                   "optional_names": list(OPTIONAL_FILES), "model_dir": model_dir, "reach": self.reach_info(),
                   "timeout": 3600}
        if not isinstance(request["manifest"], str):
            raise CollectError(f"{self.name} answered no manifest text for {model_dir}")
        return pull(request)


def _json_object(text: str) -> dict[str, Any] | None:
    """The last line of ``text`` as a JSON object, or None."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return None
    try:
        value = json.loads(lines[-1])
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None
