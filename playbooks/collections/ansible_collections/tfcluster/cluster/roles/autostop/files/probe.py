"""Autostop role probe: compare the host with what the role writes, in one read-only pass. Standard library only.

Run as ``python3 -c <this file> <spec JSON>`` (ansible.builtin.raw: no module upload). The spec:
``{"files": [{"path", "mode", "sha256"}], "absent": [PATH, ...], "config": PATH, "timer": UNIT}``. Prints one JSON
line: ``{"systemd": bool, "drift": [WHAT, ...], "timer": [is-enabled, is-active], "settings": {...} or null,
"settings_sha256": HEX or null}``. ``absent``: files that must not be there (the boot guard's checker).

``settings`` are the host's own (the boot guard's or an earlier run's), so that a run that keeps them keeps them:
only the keys tfcluster/host/autostop.py reads, each of its type (a value the role writes back, never templated); a
file that is not such an object gives null (the role then writes its own values). The role compares the settings it
writes (and the timer it wants) with these itself.
"""

import hashlib
import json
import os
import re
import stat
import subprocess
import sys

MAX_SETTINGS = 64 * 1024
BOOLS = ("enabled", "terminate")
INTS = ("idle_minutes", "gpu_idle_percent", "gpu_idle_window_minutes", "uncollected_grace_minutes")
MODES = ("jobs", "jobs_and_ssh")
TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")


def file_drift(path, mode, sha256):
    try:
        info = os.stat(path)
        with open(path, "rb") as handle:
            digest = hashlib.sha256(handle.read()).hexdigest()
    except OSError:
        return "missing"
    if not stat.S_ISREG(info.st_mode):
        return "not a file"
    if mode and format(stat.S_IMODE(info.st_mode), "04o") != mode:
        return "mode"
    return "content" if sha256 and digest != sha256 else None


def checked_settings(data):
    """The keys the checker reads, each of its type; None when anything is off (then the role's own values)."""
    if not isinstance(data, dict):
        return None
    if not all(_valid(key, value) for key, value in data.items()):
        return None
    return dict(data) if "enabled" in data else None


def _valid(key, value):
    """Whether ``value`` is one the checker reads for ``key`` (an unknown key is not)."""
    if key in BOOLS:
        return isinstance(value, bool)
    if key in INTS:
        return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 525600
    if key == "mode":
        return value in MODES
    if key == "expires_at":
        return value is None or (isinstance(value, str) and TIME.fullmatch(value) is not None)
    return False


def host_settings(path):
    """(checked settings or None, sha256 of the file or None): regular files only, no symlink followed, capped."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None, None
    try:
        info = os.fstat(fd)
        raw = os.read(fd, MAX_SETTINGS + 1) if stat.S_ISREG(info.st_mode) else b""
    finally:
        os.close(fd)
    if not raw or len(raw) > MAX_SETTINGS:
        return None, None
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        data = None
    return checked_settings(data), hashlib.sha256(raw).hexdigest()


def systemctl(*args):
    proc = subprocess.run(["systemctl", *args], capture_output=True, text=True, check=False)
    return proc.stdout.strip()


def main():
    spec = json.loads(sys.argv[1])
    drift = [f"{f['path']}: {why}" for f in spec["files"]
             for why in [file_drift(f["path"], f["mode"], f["sha256"])] if why]
    drift += [f"{path}: present" for path in spec.get("absent", []) if os.path.lexists(path)]
    why = file_drift(spec["config"], "0644", "")
    if why:
        drift.append(f"{spec['config']}: {why}")
    settings, sha256 = host_settings(spec["config"])
    systemd = os.path.isdir("/run/systemd/system")
    timer = [systemctl("is-enabled", spec["timer"]), systemctl("is-active", spec["timer"])] if systemd else []
    print(json.dumps({"systemd": systemd, "drift": drift, "timer": timer, "settings": settings,
                      "settings_sha256": sha256}))


main()
