"""Compare a host with the state a role wants, in one read-only pass. Standard library only.

Used by the ``tfcluster.cluster.state_probe`` module. A spec is ``{SECTION: {...}}``; each section may hold:
  paths     {PATH: {"type": "dir"|"file"|"link"|"exists", "mode": "0755", "owner": NAME, "group": NAME,
                    "sha256": HEX, "text": TEXT, "target": LINK_TARGET}}   (every key but "type" optional;
                                   "text": the file's content equals TEXT but for surrounding whitespace)
  packages  [NAME, ...]            Debian packages that must be installed (where dpkg keeps a status file)
  groups    [NAME, ...]            groups that must exist
  users     {NAME: {"group": NAME, "home": PATH, "shell": PATH}}
  venv      PATH                   this venv's interpreter must run ...
  imports   [MODULE, ...]          ... and find these modules (located, not imported)
The result is ``{SECTION: {"drift": {WHAT: WHY, ...}, "missing": [MODULE, ...] | null}}``; an empty drift means
the section is in place; ``missing`` is null when the venv's interpreter did not run.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import stat
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

from .core.files import sha256_file

DPKG_STATUS = "/var/lib/dpkg/status"
FIND_CODE = ("import importlib.util, json, sys; "
             "print(json.dumps([m for m in sys.argv[1:] if importlib.util.find_spec(m) is None]))")


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


def read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return ""


def _link_drift(path: str, info: os.stat_result, want: Mapping[str, str]) -> str | None:
    if not stat.S_ISLNK(info.st_mode):
        return "not a symlink"
    target = os.readlink(path)
    return None if target == want.get("target", target) else f"points at {target}"


def _kind_drift(kind: str, info: os.stat_result) -> str | None:
    if kind == "dir" and not stat.S_ISDIR(info.st_mode):
        return "not a directory"
    if kind == "file" and not stat.S_ISREG(info.st_mode):
        return "not a regular file"
    return None


def _meta_drift(info: os.stat_result, want: Mapping[str, str]) -> str | None:
    mode = want.get("mode")
    if mode is not None and stat.S_IMODE(info.st_mode) != int(mode, 8):
        return f"mode {stat.S_IMODE(info.st_mode):04o}, wanted {mode}"
    if "owner" in want and owner_name(info.st_uid) != want["owner"]:
        return f"owner {owner_name(info.st_uid)}, wanted {want['owner']}"
    if "group" in want and group_name(info.st_gid) != want["group"]:
        return f"group {group_name(info.st_gid)}, wanted {want['group']}"
    return None


def path_drift(path: str, want: Mapping[str, str]) -> str | None:
    """Why ``path`` differs from ``want`` (None when it matches)."""
    kind = want.get("type", "exists")
    try:
        info = os.lstat(path)
    except OSError:
        return "missing"
    if kind == "link":
        return _link_drift(path, info, want)
    if stat.S_ISLNK(info.st_mode):  # the modules follow a link to a directory or file: so does the probe
        try:
            info = os.stat(path)
        except OSError:
            return "dangling symlink"
    why = _kind_drift(kind, info) or _meta_drift(info, want)
    if why:
        return why
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


def missing_imports(venv: str, modules: Sequence[str]) -> list[str] | None:
    """Modules the venv's interpreter cannot find (located, not imported); None when it does not run."""
    python = os.path.join(venv, "bin", "python")
    try:
        proc = subprocess.run([python, "-c", FIND_CODE, *modules], capture_output=True, text=True, check=False,
                              timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    try:
        return list(json.loads(proc.stdout.strip().splitlines()[-1]))
    except (ValueError, IndexError):
        return None


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
    if spec.get("venv"):
        missing = missing_imports(spec["venv"], spec.get("imports", []))
        if missing is None:
            drift[spec["venv"]] = "its interpreter does not run"
    return {"drift": drift, "missing": missing}


def probe(spec: Mapping[str, Mapping[str, Any]], dpkg_status: str = DPKG_STATUS) -> dict[str, dict[str, Any]]:
    return {name: probe_section(section, dpkg_status) for name, section in spec.items()}
