"""Idle autostop on a host: power the host off after it has been idle for a while. Standard library only.

    python3 -m tfcluster.host.autostop check [--dry-run]   # what the timer runs every 60 s (as root)
    python3 -m tfcluster.host.autostop status              # one JSON line: this host's autostop (read-only)

The autostop role installs this file with tfcluster/core/contract.py under /opt/tfcluster/autostop (a copy of its own,
independent of the trainer release) and a wrapper, ``tfcluster-autostop check|status``. ``status`` is what
``make status`` condenses into its AUTOSTOP column (playbooks/status.yml, tfcluster/run/follow.py) and what
playbooks/autostop.yml (``make autostop``) shows for each host after a change.

The host is busy while a tfcluster job unit (contract.UNIT_PREFIX, a .service that is active, activating,
deactivating or reloading) runs and, in mode ``jobs_and_ssh``, while anybody is logged in over SSH (every
authenticated sshd session process counts, with or without a terminal: ``who``/utmp misses ``ssh host cmd`` and
logind misses hosts without pam_systemd). The last busy moment is kept in /var/lib/tfcluster/autostop/state.json
(it survives reboots); the boot, a change of the settings and a job unit's end count as activity too. A host idle
for ``idle_minutes`` runs ``systemctl poweroff``: the cloud's shutdown behaviour decides whether the instance is
stopped or terminated.

Optional GPU policy (``gpu_idle_percent`` > 0, only where nvidia-smi exists): while every GPU stays below that
utilisation for ``gpu_idle_window_minutes``, running job units no longer count as activity; when the host then
reaches its idle time, the job units are stopped first (SIGTERM: the trainer saves a backup and exits 3), then the
host powers off.

Uncollected jobs: where the power-off terminates the instance (``terminate``: ``DOWN=1``, spot), a finished job
that was never collected would be lost with it. A job is finished here when its model dir (the ``model_dir`` of a
job spec ``/etc/tfcluster/<job>.json``, which the job module writes as root) holds ``DONE``, and collected when the
collector left ``/etc/tfcluster/<job>.collected`` (root's, playbooks/roles/collector/tasks/mark.yml) no older than
that DONE. While such a job is there, the host stays up past its idle time, for ``uncollected_grace_minutes`` more
idle minutes at most (0: no hold), then terminates anyway.

Expiry: past ``expires_at`` (the cluster's ``tfcluster:expires``, TTL) the host powers off whatever its idle time and
whether or not idle autostop is on, its running job units stopped first (SIGTERM: the trainer saves a backup and exits
3, so a later `make start` + `make train` resumes it); unless this boot began after that time (someone started the
host again on purpose: only the idle time applies then). The uncollected-job hold applies past the expiry too
(``uncollected_grace_minutes`` past it at most).

The boot guard (infra/modules/gpu_cluster/files/boot_guard.py, from the instance's user data) runs the same checks
with the same files from the first boot; the autostop role replaces it with this checker under the same timer, and
this checker continues from the guard's settings and state (tests/unit/host/test_autostop_takeover.py).

Root reads and writes files here that others may have placed: no symlink is followed, a FIFO never blocks, every
read is capped, and the state is written through a fresh temp file (mkstemp) and an atomic rename.

Settings: /etc/tfcluster/autostop.json ``{"enabled": bool, "idle_minutes": int, "mode": "jobs"|"jobs_and_ssh",
"gpu_idle_percent": int (0: off), "gpu_idle_window_minutes": int, "terminate": bool,
"uncollected_grace_minutes": int, "expires_at": RFC 3339 time or null}``, written by the boot guard's user data
and then by the autostop role.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import glob
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from ..core.contract import AUTOSTOP_MODES, COLLECTED_SUFFIX, DONE, UNIT_PREFIX, is_digits

CONFIG = "/etc/tfcluster/autostop.json"
STATE_DIR = "/var/lib/tfcluster/autostop"
JOBS_DIR = "/etc/tfcluster"  # the job specs (<job>.json, tf_job_env_dir) and the collector's marks (<job>.collected)
STATE_MAX_BYTES = 64 * 1024
CONFIG_MAX_BYTES = 64 * 1024
SPEC_MAX_BYTES = 1 << 20
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
DIR_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
JOB_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
TIMER = "tfcluster.autostop.timer"  # not under UNIT_PREFIX: a job may be called "autostop"
GUARD = "role"  # status's "guard": this checker (the autostop role's); the boot guard says "boot"
MODES = AUTOSTOP_MODES
BUSY_STATES = frozenset({"active", "activating", "deactivating", "reloading"})
# Per-connection sshd processes after authentication: "sshd: USER@pts/0", "sshd: USER@notty" (OpenSSH >= 9.8:
# "sshd-session: ..."). The listener, "[priv]" monitors and pre-auth "[net]" processes carry no "@".
SSH_SESSION = re.compile(r"sshd(?:-session)?: \S+@\S+")
# expires_at: an RFC 3339 date-time with its offset (Terraform and the CLI write "2030-01-31T18:00:00Z").
RFC3339 = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?"
                     r"(?:[Zz]|[+-][0-9]{2}:[0-9]{2})")

Run = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


class ConfigError(ValueError):
    """The settings file is unreadable or wrong; the message names the file, the field and the fix."""


@dataclass(frozen=True)
class Config:
    installed: bool = False
    enabled: bool = False
    idle_minutes: int = 30
    mode: str = "jobs"
    gpu_idle_percent: int = 0
    gpu_idle_window_minutes: int = 30
    terminate: bool = False  # the power-off terminates the instance (DOWN=1): uncollected jobs hold it
    uncollected_grace_minutes: int = 1440  # idle minutes past idle_minutes an uncollected job holds it (0: none)
    changed_at: float | None = None  # the file's mtime: a change of the settings counts as activity
    expires_at: float | None = None  # past it the host powers off (the cluster's tfcluster:expires); None: never


@dataclass(frozen=True)
class Facts:
    """What the host looks like now (gathered by ``gather``; tests build them by hand)."""

    now: float
    boot_time: float | None
    units: tuple[str, ...] = ()  # busy job units
    unit_ended: float | None = None  # the latest time a job unit became inactive (this boot)
    ssh_sessions: int = 0
    gpu_util: tuple[int, ...] | None = None  # None: no nvidia-smi (or no readings)
    uncollected: tuple[str, ...] = ()  # finished jobs never collected (gathered only when the power-off terminates)


@dataclass(frozen=True)
class Decision:
    last_active: float
    reason: str
    idle_seconds: float
    power_off: bool
    power_off_in: float | None  # seconds until the host powers off if it stays idle; None: autostop is off
    stop_units: tuple[str, ...] = ()
    state: dict[str, Any] = field(default_factory=dict)
    held: str | None = None  # why an idle host does not power off yet (uncollected jobs)
    expired: bool = False  # past expires_at (and this boot began before it)


# ---- settings ------------------------------------------------------------------------------------------------------
def _int_field(data: dict[str, Any], key: str, default: int, path: str, *, low: int, high: int) -> int:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(f"{path}: {key} is {value!r}, not a whole number in {low}..{high}. Fix: re-run "
                          "`make autostop IDLE=...` (the autostop role writes this file)")
    return value


def read_capped(path: str, limit: int, dir_fd: int | None = None) -> tuple[bytes, float]:
    """(content, mtime) of the regular file ``path``: never through a symlink (O_NOFOLLOW: ELOOP), never blocking
    on a FIFO (O_NONBLOCK, then fstat), at most ``limit`` bytes (EFBIG). Raises OSError."""
    fd = os.open(path, READ_FLAGS, dir_fd=dir_fd)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", path)
        if info.st_size > limit:
            raise OSError(errno.EFBIG, f"larger than {limit} bytes", path)
        data = os.read(fd, limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"larger than {limit} bytes", path)
    return data, info.st_mtime


def _bool_field(data: dict[str, Any], key: str, default: bool, path: str) -> bool:
    value = data.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(f"{path}: {key} is {value!r}, not true/false. Fix: re-run `make autostop IDLE=...` (the "
                          "autostop role writes this file)")
    return value


def parse_expiry(value: object) -> float | None:
    """An RFC 3339 time with its offset (``2030-01-31T18:00:00Z``, ``...+00:00``) as epoch seconds; None for
    anything else."""
    if not isinstance(value, str) or not RFC3339.fullmatch(value.strip()):
        return None
    try:
        moment = datetime.fromisoformat(value.strip().upper().replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment.timestamp() if moment.tzinfo is not None else None


def _expiry_field(data: dict[str, Any], path: str) -> float | None:
    value = data.get("expires_at")
    if value is None:
        return None
    moment = parse_expiry(value)
    if moment is None:
        raise ConfigError(f"{path}: expires_at is {value!r}, not an RFC 3339 time like 2030-01-31T18:00:00Z (or "
                          "null). Fix: `make autostop IDLE=...` writes the cluster's expiry again (from its Terraform "
                          "state; `make provision TTL=...` sets a new one)")
    return moment


def load_config(path: str = CONFIG) -> Config:
    """The settings; an absent file means autostop is not installed (and off)."""
    try:
        raw, changed_at = read_capped(path, CONFIG_MAX_BYTES)
        data = json.loads(raw)
    except FileNotFoundError:
        return Config()
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: cannot read the autostop settings ({exc}). Fix: re-run `make autostop`") from exc
    if not isinstance(data, dict) or not isinstance(data.get("enabled", False), bool):
        raise ConfigError(f"{path}: must be a JSON object with a true/false 'enabled'. Fix: re-run `make autostop`")
    mode = data.get("mode", "jobs")
    if mode not in MODES:
        raise ConfigError(f"{path}: mode is {mode!r}. Fix: use one of {', '.join(MODES)}")
    return Config(installed=True, enabled=data.get("enabled", False), mode=mode, changed_at=changed_at,
                  idle_minutes=_int_field(data, "idle_minutes", 30, path, low=1, high=525600),
                  gpu_idle_percent=_int_field(data, "gpu_idle_percent", 0, path, low=0, high=100),
                  gpu_idle_window_minutes=_int_field(data, "gpu_idle_window_minutes", 30, path, low=1,
                                                     high=525600),
                  terminate=_bool_field(data, "terminate", False, path),
                  uncollected_grace_minutes=_int_field(data, "uncollected_grace_minutes", 1440, path, low=0,
                                                       high=525600),
                  expires_at=_expiry_field(data, path))


def load_state(state_dir: str = STATE_DIR) -> dict[str, Any]:
    try:
        data = json.loads(read_capped(os.path.join(state_dir, "state.json"), STATE_MAX_BYTES)[0])
    except (OSError, ValueError, RecursionError):
        return {}  # no state yet (or a refused one): the boot and the settings still give a last-active time
    return data if isinstance(data, dict) else {}


def save_state(state: dict[str, Any], state_dir: str = STATE_DIR) -> None:
    """Write the state atomically: a fresh temp file in the same directory (mkstemp: O_EXCL, a name nobody can
    plant), fsync, rename over state.json (replacing whatever entry is there, never writing through it), fsync
    the directory: a power cut leaves the old or the new state."""
    os.makedirs(state_dir, mode=0o755, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=state_dir, prefix=".state-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(state, handle, sort_keys=True)
            handle.flush()
            os.fchmod(handle.fileno(), 0o644)  # status reads it as any user
            os.fsync(handle.fileno())
        os.replace(tmp, os.path.join(state_dir, "state.json"))
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(state_dir, DIR_FLAGS)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


# ---- the decision (pure) -------------------------------------------------------------------------------------------
def gpu_low_since(config: Config, facts: Facts, previous: object) -> float | None:
    """Since when every GPU has been below the threshold (None: policy off, no readings, or a GPU is busy)."""
    if config.gpu_idle_percent <= 0 or not facts.gpu_util:
        return None
    if any(util >= config.gpu_idle_percent for util in facts.gpu_util):
        return None
    return float(previous) if isinstance(previous, (int, float)) and previous <= facts.now else facts.now


Moments = list[tuple[float, str]]


def _job_moments(config: Config, state: dict[str, Any], facts: Facts, low_since: float | None) -> Moments:
    """Activity of the job units: running now; or ended since the last check (at its InactiveEnterTimestamp when
    systemd still has it, else now: never earlier than the job really ended)."""
    moments: list[tuple[float, str]] = []
    window = config.gpu_idle_window_minutes * 60
    if facts.units and low_since is not None and facts.now - low_since >= window:
        moments.append((low_since + window, f"job running with its GPUs below {config.gpu_idle_percent}% since "
                        f"{rfc3339(low_since)}: " + " ".join(facts.units)))  # the job counted until then
    elif facts.units:
        moments.append((facts.now, "job running: " + " ".join(facts.units)))
    ended = sorted(set(state.get("busy_units") or ()) - set(facts.units))
    if ended:
        checked = state.get("checked_at")
        end = facts.now
        if facts.unit_ended is not None and isinstance(checked, (int, float)) and facts.unit_ended > checked:
            end = facts.unit_ended
        moments.append((end, "job ended: " + " ".join(ended)))
    elif facts.unit_ended is not None:
        moments.append((facts.unit_ended, "job unit ended"))
    return moments


def _hold(config: Config, facts: Facts, idle: float, limit: float) -> tuple[float, str | None]:
    """(the idle time at which the host powers off, why it is held past ``limit`` or None): uncollected jobs hold a
    host whose power-off terminates it, for the grace at most."""
    grace = config.uncollected_grace_minutes * 60
    if not (config.terminate and facts.uncollected and grace > 0) or idle >= limit + grace:
        return limit, None
    return limit + grace, (f"finished job(s) never collected: {' '.join(facts.uncollected)} (the power-off would "
                           f"terminate the host); it terminates anyway after {config.uncollected_grace_minutes} min "
                           "more idle (autostop_uncollected_grace_minutes)")


def expiry_applies(config: Config, facts: Facts) -> bool:
    """The host has an expiry that counts this boot: set, and this boot began before it (a host started again after
    its expiry was started on purpose; a boot time that cannot be read counts as before)."""
    return config.expires_at is not None and (facts.boot_time is None or facts.boot_time < config.expires_at)


def _expiry(config: Config, facts: Facts) -> tuple[bool, float | None, str | None]:
    """(expired now, seconds until the expiry powers the host off or None, why an expired host is held or None).
    Uncollected jobs hold a terminating host past its expiry for the grace at most, as they do past its idle time."""
    if config.expires_at is None or not expiry_applies(config, facts):
        return False, None, None
    grace = config.uncollected_grace_minutes * 60
    at = config.expires_at
    held = None
    if config.terminate and facts.uncollected and grace > 0 and facts.now < at + grace:
        at += grace
        held = (f"past its expiry {rfc3339(config.expires_at)}, but finished job(s) were never collected: "
                f"{' '.join(facts.uncollected)} (the power-off would terminate the host); it terminates anyway at "
                f"{rfc3339(at)} (autostop_uncollected_grace_minutes)")
    return facts.now >= at, max(0.0, at - facts.now), held if facts.now >= config.expires_at else None


def decide(config: Config, state: dict[str, Any], facts: Facts) -> Decision:
    """When the host was last active and why, how long it has been idle, and whether it powers off now."""
    low_since = gpu_low_since(config, facts, state.get("gpu_low_since"))
    moments = _job_moments(config, state, facts, low_since)
    if isinstance(state.get("last_active"), (int, float)):
        moments.append((float(state["last_active"]), str(state.get("reason", "earlier activity"))))
    for moment, why in ((facts.boot_time, "boot"), (config.changed_at, "settings changed")):
        if moment is not None:
            moments.append((moment, why))
    if config.mode == "jobs_and_ssh" and facts.ssh_sessions:
        moments.append((facts.now, f"{facts.ssh_sessions} SSH session(s)"))
    elif config.mode == "jobs_and_ssh" and state.get("ssh_sessions"):  # closed since the last check: now
        moments.append((facts.now, "SSH session(s) closed"))
    last_active, reason = max(moments, default=(facts.now, "first check"))
    last_active = min(last_active, facts.now)  # a clock that went back never makes a host idle "in the future"
    idle = facts.now - last_active
    limit, idle_held = _hold(config, facts, idle, config.idle_minutes * 60)
    idle_held = idle_held if config.enabled else None
    expired, expires_in, expiry_held = _expiry(config, facts)
    power_off = (config.enabled and idle >= limit) or expired
    held = None if power_off else (expiry_held or idle_held)
    holding = bool(expiry_held or (idle_held and idle >= config.idle_minutes * 60))  # past a limit, not off
    waits = [wait for wait in (max(0.0, limit - idle) if config.enabled else None, expires_in) if wait is not None]
    new_state = {"last_active": last_active, "reason": reason, "gpu_low_since": low_since, "checked_at": facts.now,
                 "busy_units": list(facts.units), "ssh_sessions": facts.ssh_sessions,
                 "held": holding and not power_off}
    return Decision(last_active=last_active, reason=reason, idle_seconds=idle, power_off=power_off,
                    power_off_in=min(waits) if waits else None,
                    stop_units=facts.units if power_off else (), state=new_state, held=held, expired=expired)


# ---- facts from the host -------------------------------------------------------------------------------------------
def _run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=60, check=False)


def boot_time(proc: str = "/proc") -> float | None:
    """Wall-clock start of PID 1 of this host: the kernel's btime plus PID 1's start in clock ticks. Also right in
    a container, whose boot is not the kernel's (and whose boot_id is the kernel's)."""
    try:
        with open(os.path.join(proc, "stat"), encoding="ascii") as handle:
            btime = next(int(line.split()[1]) for line in handle if line.startswith("btime "))
        with open(os.path.join(proc, "1", "stat"), encoding="ascii", errors="replace") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        return btime + int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22 (starttime), counted after "(comm)"
    except (OSError, StopIteration, IndexError, ValueError):
        return None


def parse_units(text: str) -> tuple[tuple[str, ...], float | None]:
    """From ``systemctl show --timestamp=unix -p Id,ActiveState,InactiveEnterTimestamp PATTERN`` output: the busy
    job units and the latest time one became inactive."""
    busy: list[str] = []
    ended: list[float] = []
    for block in text.strip().split("\n\n"):
        props = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        unit = props.get("Id", "")
        if not (unit.startswith(UNIT_PREFIX) and unit.endswith(".service")):
            continue
        if props.get("ActiveState") in BUSY_STATES:
            busy.append(unit)
        elif props.get("InactiveEnterTimestamp", "").startswith("@"):
            with contextlib.suppress(ValueError):
                ended.append(float(props["InactiveEnterTimestamp"][1:]))
    return tuple(sorted(busy)), max(ended, default=None)


def job_units(run: Run = _run) -> tuple[tuple[str, ...], float | None]:
    argv = ["systemctl", "show", "-p", "Id,ActiveState,InactiveEnterTimestamp", f"{UNIT_PREFIX}*.service"]
    proc = run([*argv[:2], "--timestamp=unix", *argv[2:]])
    if proc.returncode != 0:  # systemd < 248 has no --timestamp: the states alone
        proc = run(argv)
    if proc.returncode != 0:
        raise RuntimeError(f"`{' '.join(argv)}` failed: {proc.stderr.strip()}")
    return parse_units(proc.stdout)


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


def ssh_sessions(proc: str = "/proc") -> int:
    """Authenticated SSH connections (terminal or not), not counting the one this process runs in."""
    mine = _ancestors(proc)
    count = 0
    for pid in os.listdir(proc):
        if not is_digits(pid) or pid in mine:
            continue
        try:
            with open(os.path.join(proc, pid, "cmdline"), "rb") as handle:
                title = handle.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
        except OSError:
            continue
        count += bool(SSH_SESSION.match(title))
    return count


def parse_gpu_util(text: str) -> tuple[int, ...] | None:
    """``nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits``: one percentage per GPU; lines
    like ``[N/A]`` are skipped; None when no GPU gave a number."""
    values = tuple(int(line.strip()) for line in text.splitlines() if is_digits(line.strip()))
    return values or None


def gpu_util(run: Run = _run) -> tuple[int, ...] | None:
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        proc = run(["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"])
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_gpu_util(proc.stdout) if proc.returncode == 0 else None


def _regular_mtime(path: str, dir_fd: int | None = None) -> float | None:
    """The mtime of a regular file (None: missing, a symlink, a FIFO, anything else)."""
    try:
        info = os.stat(path, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return None
    return info.st_mtime if stat.S_ISREG(info.st_mode) else None


def _done_at(model_dir: str) -> float | None:
    """When the model dir's DONE was written (None: no DONE). The job's user owns that directory: it is opened
    without following a symlink, and DONE is only stat'ed, never read."""
    try:
        dir_fd = os.open(model_dir, DIR_FLAGS)
    except OSError:
        return None
    try:
        return _regular_mtime(DONE, dir_fd)
    finally:
        os.close(dir_fd)


def uncollected_jobs(jobs_dir: str = JOBS_DIR) -> tuple[str, ...]:
    """The jobs of this host's specs whose model dir holds DONE and whose collected mark is missing or older."""
    found = []
    for path in sorted(glob.glob(os.path.join(glob.escape(jobs_dir), "*.json"))):
        try:
            spec = json.loads(read_capped(path, SPEC_MAX_BYTES)[0])
        except (OSError, ValueError, RecursionError):
            continue
        if not isinstance(spec, dict) or not isinstance(spec.get("model_dir"), str):
            continue  # the autostop settings, or no job spec
        name = spec.get("name")
        if not isinstance(name, str) or not JOB_NAME.fullmatch(name):
            continue
        done = _done_at(spec["model_dir"])
        marked = _regular_mtime(os.path.join(jobs_dir, name + COLLECTED_SUFFIX))
        if done is not None and (marked is None or marked < done):
            found.append(name)
    return tuple(found)


def gather(config: Config, run: Run = _run, proc: str = "/proc", jobs_dir: str = JOBS_DIR) -> Facts:
    units, ended = job_units(run)
    return Facts(now=time.time(), boot_time=boot_time(proc), units=units, unit_ended=ended,
                 ssh_sessions=ssh_sessions(proc) if config.mode == "jobs_and_ssh" else 0,
                 gpu_util=gpu_util(run) if config.gpu_idle_percent > 0 else None,
                 uncollected=uncollected_jobs(jobs_dir) if config.terminate else ())


# ---- commands ------------------------------------------------------------------------------------------------------
def rfc3339(moment: float | None) -> str | None:
    if moment is None:
        return None
    return datetime.fromtimestamp(moment, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def status(config: Config, decision: Decision, facts: Facts, timer: str) -> dict[str, Any]:
    """What `make status` shows for this host (read-only: status never writes the state)."""
    return {"installed": config.installed, "enabled": config.enabled, "idle_minutes": config.idle_minutes,
            "mode": config.mode, "idle_seconds": round(decision.idle_seconds),
            "last_active": rfc3339(decision.last_active), "last_active_reason": decision.reason,
            "power_off_in_seconds": None if decision.power_off_in is None else round(decision.power_off_in),
            "busy_units": list(facts.units), "ssh_sessions": facts.ssh_sessions,
            "gpu_idle_percent": config.gpu_idle_percent, "gpu_idle_window_minutes": config.gpu_idle_window_minutes,
            "gpu_utilization": None if facts.gpu_util is None else list(facts.gpu_util), "timer": timer,
            "terminate": config.terminate, "uncollected_grace_minutes": config.uncollected_grace_minutes,
            "uncollected_jobs": list(facts.uncollected), "held": decision.held,
            "expires_at": rfc3339(config.expires_at), "expired": decision.expired, "guard": GUARD}


def check(config: Config, state_dir: str, run: Run = _run, dry_run: bool = False,
          jobs_dir: str = JOBS_DIR) -> Decision:
    """One tick: gather, decide, keep the state, and act (stop GPU-idle job units with a backup, power off)."""
    facts = gather(config, run, jobs_dir=jobs_dir)
    state = load_state(state_dir)
    decision = decide(config, state, facts)
    if not dry_run:
        save_state(decision.state, state_dir)
    if decision.state["held"] and not state.get("held"):  # logged once, when the hold begins
        print(f"idle for {decision.idle_seconds:.0f} s (limit {config.idle_minutes} min), not powering off: "
              f"{decision.held}", flush=True)
    if not decision.power_off:
        return decision
    if decision.expired:
        print(f"past its expiry {rfc3339(config.expires_at)} (the cluster's tfcluster:expires; TTL): powering off",
              flush=True)
    else:
        print(f"idle for {decision.idle_seconds:.0f} s (limit {config.idle_minutes} min; last active "
              f"{rfc3339(decision.last_active)}: {decision.reason}): powering off", flush=True)
    if dry_run:
        return decision
    if decision.stop_units:  # GPU-idle or expired job units: SIGTERM, the trainer saves a backup and exits 3
        why = ("past the expiry" if decision.expired else
               f"GPUs below {config.gpu_idle_percent}% for {config.gpu_idle_window_minutes} min")
        print(f"{why}: stopping {' '.join(decision.stop_units)} first", flush=True)
        run(["systemctl", "stop", *decision.stop_units])
    save_state({**decision.state, "powered_off_at": facts.now}, state_dir)
    proc = run(["systemctl", "poweroff"])
    if proc.returncode != 0:
        raise RuntimeError(f"`systemctl poweroff` failed: {proc.stderr.strip()}")
    return decision


def main(argv: Sequence[str] | None = None, run: Run = _run) -> int:
    parser = argparse.ArgumentParser(prog="tfcluster-autostop", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("check", "status"))
    parser.add_argument("--config", default=CONFIG)
    parser.add_argument("--state-dir", default=STATE_DIR)
    parser.add_argument("--jobs-dir", default=JOBS_DIR, help="the job specs and the collector's marks")
    parser.add_argument("--dry-run", action="store_true", help="check: decide and print, change nothing")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
        if args.command == "check":
            if config.enabled or config.expires_at is not None:
                check(config, args.state_dir, run, args.dry_run, args.jobs_dir)
            return 0
        facts = gather(config, run, jobs_dir=args.jobs_dir)
        decision = decide(config, load_state(args.state_dir), facts)
        timer = run(["systemctl", "is-active", TIMER]).stdout.strip() or "unknown"
        print(json.dumps(status(config, decision, facts, timer), sort_keys=True))
        return 0
    except (ConfigError, RuntimeError, OSError, subprocess.SubprocessError) as exc:
        print(f"tfcluster-autostop: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
