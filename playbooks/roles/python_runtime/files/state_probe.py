#!/usr/bin/env python3
"""state_probe: compare a host with the state a role wants, in one read-only pass. Standard library only.

The roles run it once per host (``python -c <this file> <spec JSON>`` over ``ansible.builtin.raw``: no module
upload, one interpreter start) and run their modules only for a section that shows a difference, so a no-op run
costs one short process per role and host instead of one Ansible module per file. It changes nothing.

The spec is ``{SECTION: {...}}``; each section may hold:
  paths     {PATH: {"type": "dir"|"file"|"link"|"exists", "mode": "0755", "owner": NAME, "group": NAME,
                    "sha256": HEX, "text": TEXT, "target": LINK_TARGET}}   (every key but "type" optional;
                                   "text": the file's content equals TEXT but for surrounding whitespace)
  packages  [NAME, ...]            Debian packages that must be installed (where dpkg keeps a status file)
  groups    [NAME, ...]            groups that must exist
  users     {NAME: {"group": NAME, "home": PATH, "shell": PATH}}
  venv      PATH                   the interpreter running the probe must be this venv's ...
  imports   [MODULE, ...]          ... and find these modules (located, not imported)
It prints ``{SECTION: {"drift": {WHAT: WHY, ...}, "missing": [MODULE, ...] | null}}`` as one JSON line; an empty
drift means the section is in place. ``missing`` is null when the probe did not run in the section's venv.
"""

from __future__ import annotations

import grp
import hashlib
import importlib.util
import json
import os
import pwd
import stat
import sys
from collections.abc import Mapping, Sequence
from typing import Any

DPKG_STATUS = "/var/lib/dpkg/status"


def sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def owner_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def path_drift(path: str, want: Mapping[str, str]) -> str | None:
    """Why ``path`` differs from ``want`` (None when it matches)."""
    kind = want.get("type", "exists")
    try:
        info = os.lstat(path)
    except OSError:
        return "missing"
    if kind == "link":
        if not stat.S_ISLNK(info.st_mode):
            return "not a symlink"
        target = os.readlink(path)
        return None if target == want.get("target", target) else f"points at {target}"
    if stat.S_ISLNK(info.st_mode):  # the modules follow a link to a directory or file: so does the probe
        try:
            info = os.stat(path)
        except OSError:
            return "dangling symlink"
    if kind == "dir" and not stat.S_ISDIR(info.st_mode):
        return "not a directory"
    if kind == "file" and not stat.S_ISREG(info.st_mode):
        return "not a regular file"
    mode = want.get("mode")
    if mode is not None and stat.S_IMODE(info.st_mode) != int(mode, 8):
        return f"mode {stat.S_IMODE(info.st_mode):04o}, wanted {mode}"
    if "owner" in want and owner_name(info.st_uid) != want["owner"]:
        return f"owner {owner_name(info.st_uid)}, wanted {want['owner']}"
    if "group" in want and group_name(info.st_gid) != want["group"]:
        return f"group {group_name(info.st_gid)}, wanted {want['group']}"
    if "sha256" in want and sha256_file(path) != want["sha256"]:
        return "content differs"
    if "text" in want and read_text(path).strip() != want["text"].strip():
        return "content differs"
    return None


def installed_packages(status_text: str) -> set[str]:
    """Names dpkg lists as ``install ok installed`` in its status file."""
    names: set[str] = set()
    for stanza in status_text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in stanza.splitlines() if ": " in line and not line[:1].isspace())
        if fields.get("Status") == "install ok installed" and "Package" in fields:
            names.add(fields["Package"])
    return names


def read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return ""


def user_drift(name: str, want: Mapping[str, str]) -> str | None:
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return "missing"
    if "group" in want and group_name(entry.pw_gid) != want["group"]:
        return f"primary group {group_name(entry.pw_gid)}, wanted {want['group']}"
    for key, actual in (("home", entry.pw_dir), ("shell", entry.pw_shell)):
        if key in want and actual != want[key]:
            return f"{key} {actual}, wanted {want[key]}"
    return None


def group_exists(name: str) -> bool:
    try:
        grp.getgrnam(name)
    except KeyError:
        return False
    return True


def in_venv(venv: str) -> bool:
    return os.path.realpath(sys.prefix) == os.path.realpath(venv)


def probe_section(spec: Mapping[str, Any], dpkg_status: str = DPKG_STATUS) -> dict[str, Any]:
    drift: dict[str, str] = {}
    for path, want in spec.get("paths", {}).items():
        why = path_drift(path, want)
        if why:
            drift[path] = why
    packages: Sequence[str] = spec.get("packages", [])
    if packages and os.path.exists(dpkg_status):
        have = installed_packages(read_text(dpkg_status))
        drift.update({f"package {name}": "not installed" for name in packages if name not in have})
    drift.update({f"group {name}": "missing" for name in spec.get("groups", []) if not group_exists(name)})
    for name, want in spec.get("users", {}).items():
        why = user_drift(name, want)
        if why:
            drift[f"user {name}"] = why
    missing: list[str] | None = None
    if "venv" in spec:
        if in_venv(spec["venv"]):
            missing = [name for name in spec.get("imports", []) if importlib.util.find_spec(name) is None]
        else:
            drift[spec["venv"]] = "its interpreter does not run"
    return {"drift": drift, "missing": missing}


def probe(spec: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    return {name: probe_section(section) for name, section in spec.items()}


def main(argv: Sequence[str]) -> int:
    if len(argv) != 1:
        print("usage: state_probe.py SPEC_JSON", file=sys.stderr)
        return 2
    print(json.dumps(probe(json.loads(argv[0])), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
