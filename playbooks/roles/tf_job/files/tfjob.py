#!/usr/bin/env python3
"""tfjob: the process side of the tf_job role. Standard library only (it runs on every host's system Python).

One file, deployed to each host as ``<prefix>/opt/tfcluster/bin/tfjob`` and also run on the control machine from the
role's ``files/`` directory. Subcommands (each prints one JSON object on stdout; exit 0 unless said otherwise):

Host side
  start SPEC            start the job described by SPEC (JSON, rendered by the role) as a supervised background
                        process with pid files; a no-op when it is already running ({"changed": false}).
  stop SPEC             SIGTERM the job (then SIGKILL after the spec's stop_timeout); a no-op when not running.
  status SPEC           state of the job: state, exit code, restarts, pid, DONE marker, the trainer's status.json,
                        log tail. With ``--unit`` it reads a systemd unit instead of the pid files.
  finalize SPEC         after a successful chief: write MANIFEST.sha256 and DONE in the model dir if the script
                        did not (bring-your-own scripts); a no-op when DONE exists.
  port-free HOST PORT   exit 0 when HOST:PORT can be bound, 1 (with a message) when it is taken.
  supervise SPEC        internal: the supervisor loop that ``start`` launches (Restart=on-failure semantics).

Control side
  evaluate              read the statuses of every host (JSON on stdin) and decide: running, done, failed,
                        stalled, preempted or timeout; print a progress line per host.
  check-inventory       validate the hosts' slots and addresses (JSON on stdin); exit 1 naming the host.

States (the same names for systemd units and supervised processes):
  inactive (never started), running, restarting, succeeded (exit 0), preempted (exit 3: spot preemption, saved a
  backup, not a failure and not restarted), failed (non-success exit beyond the restart budget), stopped (by
  ``stop``), lost (the supervisor died while the job was running; or, seen by ``evaluate``, a task that was running
  at the previous poll and now has neither a unit nor an exit record: its host rebooted and /run went with it).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

PREEMPTED_EXIT = 3
SUPERVISE_MARK = "tfjob-supervise"
SKIP_DIRS = ("__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache")
MANIFEST = "MANIFEST.sha256"
DONE = "DONE"
STATUS_FILE = "status.json"


class TfJobError(Exception):
    """A problem the caller can act on; main() prints it and exits 1."""


# ---------------------------------------------------------------------------------------------------------------
# small file helpers


def write_atomic(path: str, text: str) -> None:
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-")
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def read_json(path: str) -> Any | None:
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def read_int(path: str) -> int | None:
    try:
        with open(path) as handle:
            return int(handle.read().strip())
    except (OSError, ValueError):
        return None


def mtime(path: str) -> float | None:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


def tail(path: str, lines: int) -> list[str]:
    if lines <= 0:
        return []
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 64 * 1024))
            data = handle.read().decode("utf-8", "replace")
    except OSError:
        return []
    return data.splitlines()[-lines:]


def sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# ---------------------------------------------------------------------------------------------------------------
# env files (systemd EnvironmentFile= syntax, the subset the role writes)


def parse_env_file(text: str) -> dict[str, str]:
    """KEY=VALUE lines; '#' comments; values optionally in single quotes (verbatim) or double quotes."""
    env: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not key.replace("_", "a").isalnum():
            raise TfJobError(f"env file line {number} is not KEY=VALUE: {raw!r}")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] == "'":
            value = value[1:-1]
        elif len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1].replace('\\"', '"').replace("\\\\", "\\")
        env[key] = value
    return env


# ---------------------------------------------------------------------------------------------------------------
# the job spec (rendered by the role as JSON)

SPEC_DEFAULTS: dict[str, Any] = {
    "max_restarts": 3,
    "restart_sec": 5.0,
    "stop_timeout": 30.0,
    "success_exit_status": [0, PREEMPTED_EXIT],
    "restart_prevent_exit_status": [PREEMPTED_EXIT],
    "cpu_affinity": [],
    "log_tail_lines": 20,
    "base_env": {},
}


def load_spec(path: str) -> dict[str, Any]:
    spec = read_json(path)
    if not isinstance(spec, dict):
        raise TfJobError(f"job spec {path} is missing or not a JSON object")
    missing = [key for key in ("name", "argv", "env_file", "workdir", "run_dir", "log", "model_dir") if key not in spec]
    if missing:
        raise TfJobError("job spec {} lacks {}".format(path, ", ".join(missing)))
    merged = dict(SPEC_DEFAULTS)
    merged.update(spec)
    return merged


def state_path(spec: Mapping[str, Any]) -> str:
    return os.path.join(spec["run_dir"], "state.json")


def supervisor_pid_path(spec: Mapping[str, Any]) -> str:
    return os.path.join(spec["run_dir"], "supervisor.pid")


def main_pid_path(spec: Mapping[str, Any]) -> str:
    return os.path.join(spec["run_dir"], "main.pid")


def pid_alive(pid: int | None, marker: str | None = None) -> bool:
    """True when PID exists (and, with marker, its command line contains it: guards against pid reuse)."""
    if not pid or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        with open(f"/proc/{pid}/stat") as handle:
            if handle.read().rsplit(")", 1)[-1].split()[0] == "Z":
                return False
    except OSError:
        return False
    if marker is None:
        return True
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return marker.encode() in handle.read()
    except OSError:
        return False


def supervisor_alive(spec: Mapping[str, Any]) -> tuple[bool, int | None]:
    pid = read_int(supervisor_pid_path(spec))
    return pid_alive(pid, SUPERVISE_MARK) and pid_alive(pid, spec["run_dir"]), pid


def write_state(spec: Mapping[str, Any], **fields: Any) -> None:
    current = read_json(state_path(spec)) or {}
    current.update(fields)
    current["updated_at"] = time.time()
    write_atomic(state_path(spec), json.dumps(current, sort_keys=True) + "\n")


def child_env(spec: Mapping[str, Any]) -> dict[str, str]:
    """A clean environment like systemd gives a unit: a base set plus the env file (never the caller's env)."""
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "HOME": os.environ.get("HOME", "/"),
    }
    env.update({str(k): str(v) for k, v in spec.get("base_env", {}).items()})
    with open(spec["env_file"]) as handle:
        env.update(parse_env_file(handle.read()))
    return env


def classify_exit(returncode: int, spec: Mapping[str, Any]) -> tuple[str, int, int | None]:
    """(outcome, exit_code, signal) where outcome is succeeded, preempted or failure."""
    if returncode < 0:
        return "failure", 128 - returncode, -returncode
    if returncode in spec["restart_prevent_exit_status"] and returncode in spec["success_exit_status"]:
        return ("preempted" if returncode == PREEMPTED_EXIT else "succeeded"), returncode, None
    if returncode in spec["success_exit_status"]:
        return "succeeded", returncode, None
    return "failure", returncode, None


def supervise(spec_file: str) -> int:
    """Run the job, restarting on failure like systemd's Restart=on-failure; record state for `status`."""
    spec = load_spec(spec_file)
    os.makedirs(spec["run_dir"], exist_ok=True)
    write_atomic(supervisor_pid_path(spec), f"{os.getpid()}\n")
    stopping = {"flag": False}
    child: dict[str, subprocess.Popen | None] = {"proc": None}

    def on_signal(signum: int, _frame: Any) -> None:
        stopping["flag"] = True
        proc = child["proc"]
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    affinity = [int(cpu) for cpu in spec["cpu_affinity"]]
    if affinity and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, affinity)  # the job inherits it (like systemd's CPUAffinity=)
    restarts = 0
    write_state(spec, state="running", restarts=0, exit_code=None, signal=None, started_at=time.time())
    try:
        while True:
            with open(spec["log"], "ab") as log:
                proc = subprocess.Popen(
                    spec["argv"], env=child_env(spec), cwd=spec["workdir"], stdin=subprocess.DEVNULL,
                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                )
            child["proc"] = proc
            write_atomic(main_pid_path(spec), f"{proc.pid}\n")
            write_state(spec, state="running", pid=proc.pid, restarts=restarts)
            if stopping["flag"]:
                on_signal(signal.SIGTERM, None)
            returncode = proc.wait()
            if stopping["flag"]:
                write_state(spec, state="stopped", exit_code=returncode if returncode >= 0 else None,
                            signal=-returncode if returncode < 0 else None)
                return 0
            outcome, code, signum = classify_exit(returncode, spec)
            if outcome != "failure":
                write_state(spec, state=outcome, exit_code=code, signal=signum)
                return 0
            if restarts >= int(spec["max_restarts"]):
                write_state(spec, state="failed", exit_code=code, signal=signum)
                return 0
            restarts += 1
            write_state(spec, state="restarting", exit_code=code, signal=signum, restarts=restarts)
            deadline = time.time() + float(spec["restart_sec"])
            while time.time() < deadline and not stopping["flag"]:
                time.sleep(0.2)
            if stopping["flag"]:
                write_state(spec, state="stopped")
                return 0
    finally:
        with contextlib.suppress(OSError):
            os.unlink(supervisor_pid_path(spec))


def start(spec_file: str) -> dict[str, Any]:
    spec = load_spec(spec_file)
    alive, pid = supervisor_alive(spec)
    if alive:
        return {"changed": False, "state": "running", "supervisor_pid": pid, "msg": "already running"}
    for key in ("run_dir", "workdir", "model_dir"):
        os.makedirs(spec[key], exist_ok=True)
    os.makedirs(os.path.dirname(spec["log"]), exist_ok=True)
    if not os.path.isfile(spec["env_file"]):
        raise TfJobError("env file {} is missing".format(spec["env_file"]))
    # Fresh state for this start; keep nothing from a previous run but the log.
    with contextlib.suppress(OSError):
        os.unlink(main_pid_path(spec))
    write_atomic(state_path(spec), json.dumps({"state": "starting", "updated_at": time.time()}) + "\n")
    with open(spec["log"], "ab") as log:
        log.write(("--- tfjob start {} ---\n".format(time.strftime("%Y-%m-%dT%H:%M:%S"))).encode())
        proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "supervise", os.path.abspath(spec_file),
             SUPERVISE_MARK, spec["run_dir"]],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, close_fds=True,
        )
    deadline = time.time() + 10
    while time.time() < deadline:
        if read_int(main_pid_path(spec)) and (read_json(state_path(spec)) or {}).get("state") != "starting":
            break
        if proc.poll() is not None:
            raise TfJobError("supervisor exited at once (code {}); see {}".format(proc.returncode, spec["log"]))
        time.sleep(0.05)
    return {"changed": True, "state": "running", "supervisor_pid": proc.pid, "pid": read_int(main_pid_path(spec))}


def stop(spec_file: str) -> dict[str, Any]:
    spec = load_spec(spec_file)
    alive, pid = supervisor_alive(spec)
    main_pid = read_int(main_pid_path(spec))
    main_alive = pid_alive(main_pid)
    if not alive and not main_alive:
        return {"changed": False, "state": (read_json(state_path(spec)) or {}).get("state", "inactive")}
    if alive and pid:
        os.kill(pid, signal.SIGTERM)
    elif main_pid:
        with contextlib.suppress(OSError):
            os.killpg(main_pid, signal.SIGTERM)
    deadline = time.time() + float(spec["stop_timeout"])
    while time.time() < deadline and (supervisor_alive(spec)[0] or pid_alive(main_pid)):
        time.sleep(0.1)
    for victim in (main_pid, pid):
        if pid_alive(victim):
            try:
                os.killpg(victim, signal.SIGKILL)  # type: ignore[arg-type]
            except OSError:
                with contextlib.suppress(OSError):
                    os.kill(victim, signal.SIGKILL)  # type: ignore[arg-type]
    if (read_json(state_path(spec)) or {}).get("state") in ("running", "restarting", "starting"):
        write_state(spec, state="stopped")
    return {"changed": True, "state": "stopped"}


def model_dir_facts(model_dir: str) -> dict[str, Any]:
    status_file = os.path.join(model_dir, STATUS_FILE)
    return {
        "done": os.path.isfile(os.path.join(model_dir, DONE)),
        "progress": read_json(status_file),
        "progress_mtime": mtime(status_file),
    }


def process_status(spec: Mapping[str, Any]) -> dict[str, Any]:
    state = read_json(state_path(spec)) or {}
    alive, supervisor = supervisor_alive(spec)
    name = state.get("state", "inactive")
    if name in ("running", "restarting", "starting") and not alive:
        name = "lost"
    return {
        "state": name,
        "exit_code": state.get("exit_code"),
        "signal": state.get("signal"),
        "restarts": state.get("restarts", 0),
        "pid": read_int(main_pid_path(spec)) if alive else None,
        "supervisor_pid": supervisor if alive else None,
        "started_at": state.get("started_at"),
        "log_mtime": mtime(spec["log"]),
        "log_tail": tail(spec["log"], int(spec["log_tail_lines"])),
    }


def read_last_exit(run_dir: str) -> list[str] | None:
    """``SERVICE_RESULT EXIT_CODE EXIT_STATUS`` written by the unit's ExecStopPost (None: never ended here)."""
    try:
        with open(os.path.join(run_dir, "last-exit"), encoding="utf-8") as handle:
            fields = handle.read().split()
    except OSError:
        return None
    return fields if len(fields) == 3 else None


def last_exit_state(fields: Sequence[str] | None) -> tuple[str, int | None]:
    """State and exit code of a task whose unit systemd already unloaded (it forgets inactive units)."""
    if fields is None:
        return "inactive", None
    result, code, status = fields
    exit_code = int(status) if status.isdigit() else None
    if code == "exited" and exit_code == PREEMPTED_EXIT:
        return "preempted", exit_code
    if result == "success" and code == "exited" and exit_code == 0:
        return "succeeded", 0
    return "stopped", exit_code


def systemd_state(props: Mapping[str, str]) -> str:
    active = props.get("ActiveState", "inactive")
    status = props.get("ExecMainStatus", "0")
    if active in ("active", "reloading"):
        return "running"
    if active in ("activating", "deactivating"):
        return "restarting" if props.get("SubState") == "auto-restart" else "running"
    if active == "failed":
        return "failed"
    if props.get("ExecMainStartTimestampMonotonic", "0") in ("", "0"):
        return "inactive"
    if status == str(PREEMPTED_EXIT):
        return "preempted"
    if props.get("Result") == "success" and status == "0":
        return "succeeded"
    return "stopped"


def unit_status(unit: str, lines: int, run_dir: str | None = None) -> dict[str, Any]:
    keys = "ActiveState,SubState,Result,ExecMainStatus,ExecMainCode,NRestarts,MainPID,ExecMainStartTimestampMonotonic"
    out = subprocess.run(["systemctl", "show", unit, "-p", keys], stdout=subprocess.PIPE, text=True,
                         check=False).stdout
    props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    journal = subprocess.run(["journalctl", "-u", unit, "-n", str(lines), "--no-pager", "-o", "cat"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, check=False)
    since = subprocess.run(["journalctl", "-u", unit, "-n", "1", "--no-pager", "-o", "json"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, check=False)
    log_mtime = None
    with contextlib.suppress(ValueError, IndexError, KeyError):
        log_mtime = int(json.loads(since.stdout.splitlines()[-1])["__REALTIME_TIMESTAMP"]) / 1e6
    main_pid = int(props.get("MainPID", "0") or 0)
    state, exit_code = systemd_state(props), int(props.get("ExecMainStatus", "0") or 0)
    if state == "inactive" and run_dir:  # unloaded after it ended: how it ended is in run_dir/last-exit
        state, last_code = last_exit_state(read_last_exit(run_dir))
        exit_code = last_code if last_code is not None else exit_code
    return {
        "state": state,
        "exit_code": exit_code,
        "signal": None,
        "restarts": int(props.get("NRestarts", "0") or 0),
        "pid": main_pid or None,
        "supervisor_pid": None,
        "started_at": None,
        "log_mtime": log_mtime,
        "log_tail": journal.stdout.splitlines()[-lines:] if lines > 0 else [],
        "unit": unit,
    }


def status(spec_file: str, unit: str | None, tail_lines: int | None = None) -> dict[str, Any]:
    spec = load_spec(spec_file)
    if tail_lines is not None:
        spec["log_tail_lines"] = tail_lines
    result = unit_status(unit, int(spec["log_tail_lines"]), spec["run_dir"]) if unit else process_status(spec)
    result.update(model_dir_facts(spec["model_dir"]))
    result["name"] = spec["name"]
    result["model_dir"] = spec["model_dir"]
    result["now"] = time.time()
    return result


# ---------------------------------------------------------------------------------------------------------------
# the manifest a bring-your-own script did not write


def tree_files(root: str) -> list[str]:
    """Relative paths of the regular files under root, sorted, skipping caches and temp files."""
    found: list[str] = []
    for directory, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        for name in files:
            if name.endswith((".pyc", ".pyo")) or name.startswith(".tmp-"):
                continue
            path = os.path.join(directory, name)
            if os.path.isfile(path) and not os.path.islink(path):
                found.append(os.path.relpath(path, root))
    return sorted(found)


def write_manifest(model_dir: str) -> int:
    entries = [rel for rel in tree_files(model_dir) if rel not in (MANIFEST, DONE)]
    text = "".join(f"{sha256_file(os.path.join(model_dir, rel))}  {rel}\n" for rel in entries)
    write_atomic(os.path.join(model_dir, MANIFEST), text)
    return len(entries)


def finalize(spec_file: str) -> dict[str, Any]:
    spec = load_spec(spec_file)
    model_dir = spec["model_dir"]
    if os.path.isfile(os.path.join(model_dir, DONE)):
        return {"changed": False, "msg": "DONE already present"}
    files = write_manifest(model_dir)
    write_atomic(os.path.join(model_dir, DONE), json.dumps({"finished_at": time.time(), "writer": "tfjob"}) + "\n")
    return {"changed": True, "files": files}


def port_free(host: str, port: int) -> tuple[bool, str]:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as error:
        reason = error.strerror or error
        return False, f"port {host}:{port} is not free ({reason}): stop what listens there or pick another port"
    finally:
        sock.close()
    return True, f"port {host}:{port} is free"


# ---------------------------------------------------------------------------------------------------------------
# control side: inventory check and the wait decision


def check_inventory(hosts: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Problems with the hosts' slots: each message names the host and the fix."""
    problems: list[str] = []
    if not hosts:
        return ["the inventory has no hosts in group tfcluster. Fix: give at least one worker (WORKERS>=1) "
                "or check TFCLUSTER_SOURCE / the hosts file"]
    by_type: dict[str, list[tuple[int, str]]] = {}
    addresses: dict[str, str] = {}
    for name in sorted(hosts):
        hv = hosts[name]
        task_type, index, address = hv.get("tfcluster_task_type"), hv.get("tfcluster_task_index"), \
            hv.get("tfcluster_address")
        if task_type not in ("chief", "worker", "ps", "evaluator"):
            problems.append(f"{name}: tfcluster_task_type {task_type!r} is not chief/worker/ps/evaluator. "
                            "Fix: declare the "
                            "host's slot in the inventory")
            continue
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            problems.append(f"{name}: tfcluster_task_index {index!r} is not a non-negative integer. "
                            "Fix: declare the slot "
                            "index")
            continue
        by_type.setdefault(task_type, []).append((index, name))
        if not isinstance(address, str) or ":" not in address:
            problems.append(f"{name}: tfcluster_address {address!r} is not host:port. Fix: the inventory must set it")
        elif address in addresses:
            problems.append(f"{name}: address {address} is also used by {addresses[address]}. "
                            "Fix: give each host its own port or address")
        else:
            addresses[address] = name
        raw = hv.get("tfcluster_tf_config")
        if task_type != "evaluator" or raw:
            try:
                tf_config = json.loads(raw) if isinstance(raw, str) else raw
                task = tf_config["task"]
                if task["type"] != task_type or int(task["index"]) != index:
                    problems.append(f"{name}: tfcluster_tf_config task {task['type']}:{task['index']} does not match "
                                    f"the slot {task_type}:{index}. Fix: regenerate the inventory")
            except (TypeError, ValueError, KeyError):
                problems.append(f"{name}: tfcluster_tf_config is missing or not TF_CONFIG JSON. Fix: use the "
                                "inventory script (inventory/tfcluster.py)")
    for task_type, slots in sorted(by_type.items()):
        indices = sorted(index for index, _ in slots)
        seen: dict[int, str] = {}
        for index, name in sorted(slots):
            if index in seen:
                problems.append(f"{name}: slot {task_type}:{index} is also held by {seen[index]}. "
                                "Fix: give each host its own index")
            seen[index] = name
        expected = list(range(len(set(indices))))
        if sorted(set(indices)) != expected:
            problems.append(f"{task_type} indices {sorted(set(indices))} are not contiguous from 0. "
                            f"Fix: renumber the {task_type} hosts")
    if "chief" not in by_type and "worker" not in by_type:
        problems.append("no chief and no worker in the inventory. Fix: add at least one worker")
    if len(by_type.get("chief", [])) > 1:
        problems.append("more than one chief. Fix: keep exactly one chief")
    return problems


def fmt_rate(value: Any) -> str:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return "-"
    return "%.1fk" % (number / 1000.0) if number >= 1000 else f"{number:.0f}"


def progress_line(name: str, slot: str, status: Mapping[str, Any]) -> str:
    progress = status.get("progress") if isinstance(status.get("progress"), dict) else {}
    state = status.get("state", "?")
    if isinstance(progress.get("state"), str) and state == "running":
        state = f"running/{progress['state']}"
    parts = [f"{name:<10} {slot:<10} {state:<18}"]
    epoch, epochs = progress.get("epoch"), progress.get("epochs")
    if epoch is not None:
        parts.append("epoch {}/{}".format(epoch, epochs if epochs is not None else "?"))
    step, steps = progress.get("step"), progress.get("steps_per_epoch", progress.get("steps"))
    if step is not None:
        parts.append("step {}/{}".format(step, steps if steps is not None else "?"))
    for key, label in (("loss", "loss"), ("accuracy", "acc")):
        if isinstance(progress.get(key), (int, float)):
            parts.append(f"{label} {progress[key]:.4f}")
    rate = progress.get("examples_per_sec", progress.get("examples_per_second"))
    if rate is not None:
        parts.append(f"{fmt_rate(rate)} ex/s")
    if status.get("restarts"):
        parts.append("restarts {}".format(status["restarts"]))
    if status.get("done"):
        parts.append("DONE")
    if not progress and status.get("state") == "running":
        parts.append("starting (no status.json yet)")
    return "  ".join(parts)


def remembered_state(state: str | None, before: str | None) -> str | None:
    """A task's state given what the previous poll saw: the exit record lives in /run, so a reboot erases it.

    Seen running (or restarting) and now ``inactive`` (no unit, no record): the task was lost with its host. Seen
    finished and now ``inactive``: it did finish, the record is just gone. Anything else reads as it is.
    """
    if state != "inactive" or before is None:
        return state
    if before in ("running", "restarting", "lost"):
        return "lost"
    if before in ("succeeded", "preempted", "stopped", "failed"):
        return before
    return state


def evaluate(payload: Mapping[str, Any]) -> dict[str, Any]:
    """Decide the job's fate from every host's status; pure function of its input (now comes in the payload)."""
    now = float(payload.get("now") or time.time())
    raw_start = payload.get("started_at")
    started = now if raw_start in (None, "", "None") else float(raw_start)
    timeout = float(payload.get("timeout", 3600))
    stall = float(payload.get("stall_timeout", 600))
    chief = payload.get("chief")
    require_done = bool(payload.get("require_done", True))
    seen_in: Mapping[str, Any] = payload.get("seen") or {}
    seen: dict[str, Any] = {}
    lines: list[str] = []
    statuses: dict[str, dict[str, Any]] = {}
    failures: list[tuple[str, str]] = []
    hosts = payload.get("hosts") or {
        name: {"task_type": task_type, "task_index": task_index, "result": result}
        for name, result, task_type, task_index in zip(
            payload["names"], payload["results"], payload["task_types"], payload["task_indexes"], strict=False)
    }
    for name, entry in sorted(hosts.items()):
        slot = f"{entry.get('task_type')}:{entry.get('task_index')}"
        result = entry.get("result") or {}
        if result.get("unreachable"):
            failures.append((name, "host unreachable: {}".format(result.get("msg", ""))))
            lines.append(f"{name:<10} {slot:<10} unreachable")
            continue
        try:
            status = json.loads(result.get("stdout") or "")
        except ValueError:
            failures.append((name, "could not read job status (rc={}): {}".format(result.get("rc"),
                                                                             (result.get("stderr") or "")[-400:])))
            lines.append(f"{name:<10} {slot:<10} status unreadable")
            continue
        previous = seen_in.get(name) or {}
        state = remembered_state(status.get("state"), previous.get("state"))
        if state == "lost" and status.get("state") == "inactive":
            status["lost_after"] = previous.get("state")
        status["state"] = state
        statuses[name] = status
        lines.append(progress_line(name, slot, status))
        marks = [status.get("progress_mtime") or 0, status.get("log_mtime") or 0,
                 json.dumps(status.get("progress"), sort_keys=True)]
        since = previous.get("since", now) if previous.get("marks") == marks else now
        seen[name] = {"marks": marks, "since": since, "state": status["state"]}
    for name, status in sorted(statuses.items()):
        state = status.get("state")
        if state == "lost" and status.get("lost_after"):
            failures.append((name, "job lost on {}: it was {} at the last poll and now has no unit and no exit record "
                                   "(the host rebooted, or its unit was removed)".format(name, status["lost_after"])))
        elif state in ("failed", "lost"):
            code = status.get("exit_code")
            failures.append((name, "job {} on {} (exit code {}, restarts {})".format(state, name, code,
                                                                                 status.get("restarts"))))
        elif state in ("stopped", "inactive") and any(
                other.get("state") in ("running", "restarting") for other in statuses.values()):
            failures.append((name, f"job is {state} on {name} while the others run (stopped outside this playbook?)"))
    decision, culprit, message = "running", None, ""
    preempted = [name for name, status in statuses.items() if status.get("state") == "preempted"]
    if failures:
        decision, (culprit, message) = "failed", failures[0]
    elif preempted:
        decision, culprit = "preempted", preempted[0]
        message = (f"{culprit} was preempted (exit 3, a backup was saved): run the same job again to resume from it")
    elif statuses and all(status.get("state") in ("stopped", "inactive") for status in statuses.values()):
        decision, culprit = "stopped", chief
        message = "no task of the job is running (never started, or stopped)"
    elif statuses and all(status.get("state") == "succeeded" for status in statuses.values()):
        if require_done and chief in statuses and not statuses[chief].get("done"):
            decision, culprit = "failed", chief
            message = "every task exited 0 but the chief {} wrote no DONE marker in {}".format(
                chief, statuses[chief].get("model_dir"))
        else:
            decision, message = "done", "every task finished"
    elif now - started > timeout:
        decision, culprit = "timeout", chief
        message = f"the job did not finish within {timeout:.0f}s (tf_job_wait_timeout)"
    else:
        for name, status in sorted(statuses.items()):
            if status.get("state") == "running" and now - float(seen[name]["since"]) > stall:
                decision, culprit = "stalled", name
                message = f"{name} made no progress for {stall:.0f}s (tf_job_stall_timeout)"
                break
    return {"decision": decision, "culprit": culprit, "message": message, "lines": lines, "seen": seen,
            "started_at": started, "elapsed": round(now - started, 1)}


# ---------------------------------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="tfjob", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("start", "stop", "finalize"):
        sub.add_parser(name).add_argument("spec")
    p_status = sub.add_parser("status")
    p_status.add_argument("spec")
    p_status.add_argument("--unit", default=None, help="read this systemd unit instead of the pid files")
    p_status.add_argument("--delay", type=float, default=0.0, help="sleep this long first (the wait loop's poll)")
    p_status.add_argument("--tail", type=int, default=None, help="log lines to return (default: the spec's)")
    p_sup = sub.add_parser("supervise")
    p_sup.add_argument("spec")
    p_sup.add_argument("marks", nargs="*")
    p_port = sub.add_parser("port-free")
    p_port.add_argument("host")
    p_port.add_argument("port", type=int)
    sub.add_parser("evaluate")
    sub.add_parser("check-inventory")
    return parser.parse_args(argv)


def emit(data: Mapping[str, Any]) -> None:
    sys.stdout.write(json.dumps(data, sort_keys=True) + "\n")


def run(args: argparse.Namespace) -> int:
    if args.command == "supervise":
        return supervise(args.spec)
    if args.command == "start":
        emit(start(args.spec))
    elif args.command == "stop":
        emit(stop(args.spec))
    elif args.command == "status":
        if args.delay > 0:
            time.sleep(args.delay)
        emit(status(args.spec, args.unit, args.tail))
    elif args.command == "finalize":
        emit(finalize(args.spec))
    elif args.command == "port-free":
        free, message = port_free(args.host, args.port)
        emit({"free": free, "msg": message})
        return 0 if free else 1
    elif args.command == "evaluate":
        emit(evaluate(json.load(sys.stdin)))
    elif args.command == "check-inventory":
        problems = check_inventory(json.load(sys.stdin))
        emit({"problems": problems})
        return 1 if problems else 0
    return 0


def main(argv: Iterable[str] | None = None) -> int:
    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        return run(args)
    except TfJobError as error:
        emit({"failed": True, "msg": str(error)})
        return 1


if __name__ == "__main__":
    sys.exit(main())
