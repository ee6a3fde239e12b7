#!/usr/bin/python3
"""tfcluster boot guard: a host's cost guard from its first boot until the autostop role takes over. Stdlib only.

    boot_guard.py check     # what tfcluster.autostop.timer runs every 60 s (as root)
    boot_guard.py status    # one JSON line, with the keys of `tfcluster-autostop status`

The instance's user data (infra/modules/gpu_cluster/userdata.tf) installs this file, its settings and the
tfcluster.autostop service and timer, so a host that is never prepared still stops. It uses the files the autostop
role (tfcluster/host/autostop.py) takes over: the settings /etc/tfcluster/autostop.json (Terraform writes them:
enabled, idle_minutes, mode, gpu_idle_percent, gpu_idle_window_minutes, terminate, uncollected_grace_minutes and
expires_at) and the state /var/lib/tfcluster/autostop/state.json, in the checker's own format, so the checker the
role installs under the same timer continues where this one stopped.

Busy: a job unit (``tfcluster-*.service``; the other tfcluster units are named tfcluster.<what>.service) that is
active, activating, deactivating or reloading, or an SSH login, whatever the settings' mode: before the role takes
over, a login is the prepare itself (Ansible's connection stays open for the whole play) or someone setting the host
up, and a host powered off under either loses the work. The boot, a change of the settings, a job unit's end and the
last SSH session's end count as activity. Idle for idle_minutes (enabled) -> ``systemctl poweroff``. Past
expires_at -> ``systemctl poweroff`` too, unless this boot began after that time (someone started the host again on
purpose: the idle time still applies).
The instance's shutdown behaviour (Terraform's autostop_down) decides whether it is stopped or terminated.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone

CONFIG = "/etc/tfcluster/autostop.json"
STATE_DIR = "/var/lib/tfcluster/autostop"
JOB_PREFIX = "tfcluster-"  # job units only (tfcluster/core/contract.py UNIT_PREFIX)
JOB_UNITS = JOB_PREFIX + "*.service"
TIMER = "tfcluster.autostop.timer"
BUSY_STATES = frozenset({"active", "activating", "deactivating", "reloading"})
MAX_BYTES = 64 * 1024
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
# An authenticated sshd connection, terminal or not (tfcluster/host/autostop.py SSH_SESSION).
SSH_SESSION = re.compile(r"sshd(?:-session)?: \S+@\S+")
DEFAULTS = {"enabled": False, "idle_minutes": 30, "mode": "jobs", "expires_at": None}


def read_json(path: str) -> tuple[object, float]:
    """(parsed content, mtime) of a regular file, never through a symlink, at most MAX_BYTES. Raises OSError or
    ValueError."""
    fd = os.open(path, READ_FLAGS)
    try:
        info = os.fstat(fd)
        if not (info.st_mode & 0o170000 == 0o100000 and info.st_size <= MAX_BYTES):
            raise ValueError(f"{path}: not a regular file of at most {MAX_BYTES} bytes")
        data = os.read(fd, MAX_BYTES + 1)
    finally:
        os.close(fd)
    return json.loads(data), info.st_mtime


def parse_time(value: object) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.strptime(value, TIME_FORMAT).replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        return None


def rfc3339(moment: float | None) -> str | None:
    return None if moment is None else datetime.fromtimestamp(moment, timezone.utc).strftime(TIME_FORMAT)


def load_config(path: str) -> dict[str, object]:
    """The settings (an absent file: off). A bad value is refused, naming the file, the field and the fix."""
    try:
        data, changed_at = read_json(path)
    except FileNotFoundError:
        return {**DEFAULTS, "installed": False, "changed_at": None}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a JSON object. Fix: provision the host again, or run `make autostop`")
    config = {**DEFAULTS, **data, "installed": True, "changed_at": changed_at}
    idle = config["idle_minutes"]
    if not isinstance(config["enabled"], bool) or isinstance(idle, bool) or not isinstance(idle, int) or idle < 1:
        raise ValueError(f"{path}: enabled must be true/false and idle_minutes a whole number >= 1. Fix: provision "
                         "the host again, or run `make autostop IDLE=...`")
    if config["expires_at"] is not None and parse_time(config["expires_at"]) is None:
        raise ValueError(f"{path}: expires_at {config['expires_at']!r} is not an RFC 3339 UTC time like "
                         "2030-01-31T18:00:00Z. Fix: provision the host again (TTL=...)")
    return config


def load_state(state_dir: str) -> dict[str, object]:
    try:
        data, _ = read_json(os.path.join(state_dir, "state.json"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def save_state(state: dict[str, object], state_dir: str) -> None:
    """A fresh temp file in the same directory, fsynced, renamed over state.json: the old or the new state."""
    os.makedirs(state_dir, mode=0o755, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=state_dir, prefix=".state-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(state, handle, sort_keys=True)
            handle.flush()
            os.fchmod(handle.fileno(), 0o644)
            os.fsync(handle.fileno())
        os.replace(tmp, os.path.join(state_dir, "state.json"))
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def boot_time(proc: str) -> float | None:
    """Wall-clock start of PID 1: the kernel's btime plus PID 1's start time in clock ticks."""
    try:
        with open(os.path.join(proc, "stat"), encoding="ascii") as handle:
            btime = next(int(line.split()[1]) for line in handle if line.startswith("btime "))
        with open(os.path.join(proc, "1", "stat"), encoding="ascii", errors="replace") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        return btime + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, StopIteration, IndexError, ValueError):
        return None


def job_units() -> tuple[list[str], float | None]:
    """The busy job units and the latest time one became inactive (``systemctl show``; systemd < 248 has no
    --timestamp=unix: the states alone)."""
    argv = ["systemctl", "show", "-p", "Id,ActiveState,InactiveEnterTimestamp", JOB_UNITS]
    proc = subprocess.run([*argv[:2], "--timestamp=unix", *argv[2:]], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"`{' '.join(argv)}` failed: {proc.stderr.strip()}")
    return parse_units(proc.stdout)


def parse_units(text: str) -> tuple[list[str], float | None]:
    """``systemctl show`` output read as tfcluster.host.autostop.parse_units reads it (this file cannot import it;
    tests/unit/infra/test_boot_guard.py proves the two agree)."""
    busy: list[str] = []
    ended: list[float] = []
    for block in text.strip().split("\n\n"):
        props = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        unit = props.get("Id", "")
        if not (unit.startswith(JOB_PREFIX) and unit.endswith(".service")):
            continue
        if props.get("ActiveState") in BUSY_STATES:
            busy.append(unit)
        elif props.get("InactiveEnterTimestamp", "").startswith("@"):
            with contextlib.suppress(ValueError):
                ended.append(float(props["InactiveEnterTimestamp"][1:]))
    return sorted(busy), max(ended, default=None)


def _ancestors(proc: str) -> set[str]:
    """This process and its parents (the SSH session that runs `status` is not someone else's session)."""
    pids: set[str] = set()
    pid = str(os.getpid())
    while pid not in pids and pid not in ("0", ""):
        pids.add(pid)
        try:
            with open(os.path.join(proc, pid, "stat"), encoding="ascii", errors="replace") as handle:
                pid = handle.read().rsplit(")", 1)[1].split()[1]
        except (OSError, IndexError):
            break
    return pids


def ssh_sessions(proc: str) -> int:
    """Authenticated SSH connections not counting the caller's own, counted as tfcluster.host.autostop.ssh_sessions
    counts them (tests/unit/infra/test_boot_guard.py proves the two agree)."""
    mine = _ancestors(proc)
    count = 0
    for pid in os.listdir(proc):
        if not (pid.isascii() and pid.isdigit()) or pid in mine:
            continue
        try:
            with open(os.path.join(proc, pid, "cmdline"), "rb") as handle:
                title = handle.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
        except OSError:
            continue
        count += bool(SSH_SESSION.match(title))
    return count


def decide(config: dict[str, object], state: dict[str, object], facts: dict[str, object]) -> dict[str, object]:
    """When the host was last active and why, and whether it powers off now (idle, or past its expiry). facts: now,
    boot (PID 1's start), units (busy job units), ended (the latest time a job unit became inactive), ssh (SSH
    sessions)."""
    now, boot, units, ended, ssh = facts["now"], facts["boot"], facts["units"], facts["ended"], facts["ssh"]
    moments: list[tuple[float, str]] = []
    if units:
        moments.append((now, "job running: " + " ".join(units)))
    if ssh:
        moments.append((now, f"{ssh} SSH session(s)"))
    elif state.get("ssh_sessions"):  # closed since the last check: now
        moments.append((now, "SSH session(s) closed"))
    gone = sorted(set(state.get("busy_units") or ()) - set(units))
    checked = state.get("checked_at")
    if gone:
        fresh = ended is not None and isinstance(checked, (int, float)) and ended > checked
        moments.append((ended if fresh and ended is not None else now, "job ended: " + " ".join(gone)))
    elif ended is not None:
        moments.append((ended, "job unit ended"))
    if isinstance(state.get("last_active"), (int, float)):
        moments.append((float(state["last_active"]), str(state.get("reason", "earlier activity"))))
    for moment, why in ((boot, "boot"), (config["changed_at"], "settings changed")):
        if isinstance(moment, (int, float)):
            moments.append((float(moment), why))
    last_active, reason = max(moments, default=(now, "first check"))
    last_active = min(last_active, now)
    idle = now - last_active
    limit = int(config["idle_minutes"]) * 60
    expires = parse_time(config["expires_at"])
    expired = expires is not None and now >= expires and (boot is None or boot < expires)
    return {"last_active": last_active, "reason": reason, "idle": idle, "expired": expired, "expires": expires,
            "power_off": expired or (config["enabled"] is True and idle >= limit),
            "power_off_in": max(0.0, limit - idle) if config["enabled"] else None,
            "state": {"last_active": last_active, "reason": reason, "gpu_low_since": None, "checked_at": now,
                      "busy_units": units, "ssh_sessions": ssh, "held": False}}


def gather(proc: str) -> dict[str, object]:
    """What one check decides on (the facts of decide), read once: the check and the status read it alike."""
    units, ended = job_units()
    return {"now": time.time(), "boot": boot_time(proc), "units": units, "ended": ended, "ssh": ssh_sessions(proc)}


def check(config: dict[str, object], state_dir: str, proc: str) -> dict[str, object]:
    """One tick: gather, decide, keep the state, power off when idle or expired."""
    facts = gather(proc)
    now = facts["now"]
    decision = decide(config, load_state(state_dir), facts)
    save_state(decision["state"], state_dir)
    if not decision["power_off"]:
        return decision
    if decision["expired"]:
        why = f"past its expiry {config['expires_at']}"
    else:
        why = (f"idle for {decision['idle']:.0f} s (limit {config['idle_minutes']} min; last active "
               f"{rfc3339(decision['last_active'])}: {decision['reason']})")
    print(f"tfcluster boot guard: {why}: powering off", flush=True)
    save_state({**decision["state"], "powered_off_at": now}, state_dir)
    result = subprocess.run(["systemctl", "poweroff"], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"`systemctl poweroff` failed: {result.stderr.strip()}")
    return decision


def status(config: dict[str, object], state_dir: str, proc: str) -> dict[str, object]:
    """What `make status` shows (read-only), with the keys tfcluster/host/autostop.py prints, plus the expiry."""
    facts = gather(proc)
    decision = decide(config, load_state(state_dir), facts)
    timer = subprocess.run(["systemctl", "is-active", TIMER], capture_output=True, text=True, check=False)
    off_in = decision["power_off_in"]
    return {"installed": config["installed"], "enabled": config["enabled"], "idle_minutes": config["idle_minutes"],
            "mode": config["mode"], "idle_seconds": round(decision["idle"]),
            "last_active": rfc3339(decision["last_active"]),
            "last_active_reason": decision["reason"],
            "power_off_in_seconds": None if off_in is None else round(off_in),
            "busy_units": facts["units"], "ssh_sessions": facts["ssh"], "gpu_idle_percent": 0,
            "gpu_idle_window_minutes": 30,
            "gpu_utilization": None, "timer": timer.stdout.strip() or "unknown",
            "terminate": bool(config.get("terminate")),
            "uncollected_grace_minutes": config.get("uncollected_grace_minutes", 1440),
            "uncollected_jobs": [], "held": None, "expires_at": config["expires_at"],
            "expired": decision["expired"], "guard": "boot"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tfcluster-autostop", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("check", "status"))
    parser.add_argument("--config", default=CONFIG)
    parser.add_argument("--state-dir", default=STATE_DIR)
    parser.add_argument("--proc", default="/proc", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
        if args.command == "status":
            print(json.dumps(status(config, args.state_dir, args.proc), sort_keys=True))
        elif config["enabled"] or config["expires_at"] is not None:
            check(config, args.state_dir, args.proc)
        return 0
    except (OSError, ValueError, RuntimeError) as exc:
        print(f"tfcluster-autostop: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
