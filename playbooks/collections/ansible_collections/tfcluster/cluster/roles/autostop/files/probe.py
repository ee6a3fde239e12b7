"""Autostop role probe: compare the host with what the role writes, in one read-only pass. Standard library only.

Run as ``python3 -c <this file> <spec JSON>`` (ansible.builtin.raw: no module upload). The spec:
``{"files": [{"path", "mode", "sha256"}], "config": PATH, "config_sha256": HEX or "" (presence only),
"timer": UNIT, "enabled": bool}``. Prints one JSON line: ``{"systemd": bool, "drift": [WHAT, ...]}``.
"""

import hashlib
import json
import os
import stat
import subprocess
import sys


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


def systemctl(*args):
    proc = subprocess.run(["systemctl", *args], capture_output=True, text=True, check=False)
    return proc.stdout.strip()


def main():
    spec = json.loads(sys.argv[1])
    drift = [f"{f['path']}: {why}" for f in spec["files"]
             for why in [file_drift(f["path"], f["mode"], f["sha256"])] if why]
    why = file_drift(spec["config"], "0644", spec["config_sha256"])
    if why:
        drift.append(f"{spec['config']}: {why}")
    systemd = os.path.isdir("/run/systemd/system")
    if systemd:
        want = ("enabled", "active") if spec["enabled"] else ("disabled", "inactive")
        have = (systemctl("is-enabled", spec["timer"]), systemctl("is-active", spec["timer"]))
        if have != want:
            drift.append(f"{spec['timer']}: {'/'.join(have)}, wanted {'/'.join(want)}")
    print(json.dumps({"systemd": systemd, "drift": drift}))


main()
