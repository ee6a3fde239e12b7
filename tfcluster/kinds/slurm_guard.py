"""The Slurm kind's shared directory, written by the operator alone (issue 37, point 4).

What runs on the login node is wrapped by :func:`remote` (``umask 077`` first: what it creates is the login user's
alone, the tasks' files too, through sbatch's ``SLURM_UMASK``). A tree that is already on the shared directory is
reused only when :data:`GUARD`'s ``mine`` finds nothing in it owned by another user or writable by group or others.
The preflight refuses a ``shared_dir`` another user owns, or that group or others may write, or under a parent they
may write without the sticky bit (:func:`shared_dir_problems`, on the login node's ``stat`` lines). A record read back
from the shared directory is data: its paths and slot must be the layout's (:func:`record_problems`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from tfcluster.core.contract import Problem

# ``mine PATH``: exit 4, naming PATH, the first offending entry and the fix, unless every entry under PATH is the
# login user's and no file or directory in it (a link's own mode does not count) is writable by group or others.
GUARD = r"""mine() {
  bad=$(find "$1" \( ! -user "$(id -u)" -o \( ! -type l -perm /022 \) \) -print -quit 2>&1) || bad="${bad:-$1}"
  [ -z "$bad" ] && return 0
  fix="Fix: remove $1 (rm -rf), or chown/chmod -R go-w it if you trust its contents"
  echo "$1 is not the login user's alone: $bad is another user's or writable by group or others. $fix" >&2; exit 4
}
"""
# A login-node tool run from the staged release: its own directory (never the job's) first on sys.path, none with
# Python 3.11+ (PYTHONSAFEPATH), bytecode in a private cache. $1 release $2 cache $3 python, then the tool's words.
TOOL_SCRIPT = GUARD + r"""set -e; r=$1 c=$2 py=$3; shift 3
mkdir -p "$c"; mine "$c"; cd "$r"
PYTHONSAFEPATH=1 PYTHONPYCACHEPREFIX=$c PYTHONPATH=$r exec "$py" -m tfcluster.host.slurm_task "$@"
"""
# The preflight's lines about the shared directory: the login user's uid, then "self|parent UID MODE PATH" for it and
# each parent (as named and physical: stat -L), then the first entries (3 levels down) that are not the user's alone.
PREFLIGHT_SHARED = r"""echo "@@uid"; id -u
echo "@@dirs"; for top in "$shared" "$(cd "$shared" 2>/dev/null && pwd -P)"; do k=self d=$top
  while [ -n "$d" ]; do stat -L -c "$k %u %a %n" -- "$d" 2>/dev/null; k=parent
    [ "$d" = / ] && break; d=$(dirname -- "$d"); done; done | head -64
echo "@@foreign"; [ ! -d "$shared" ] || find "$shared" -maxdepth 3 \( ! -user "$(id -u)" -o \
  \( ! -type l -perm /022 \) \) -print 2>&1 | head -3
"""
UMASK = "umask 077 && exec \"$@\""
PYCACHE = ".pycache"  # <shared_dir>/.pycache: the login-node tools' bytecode (0700)
_HEX64 = re.compile(r"[0-9a-f]{64}")
_SPEC = re.compile(r"spec-[0-9a-f]{16}\.json")
WRITABLE_BY_OTHERS, STICKY = 0o022, 0o1000


def remote(words: Sequence[str]) -> list[str]:
    """``words`` run on the login node after ``umask 077``."""
    return ["sh", "-c", UMASK, "umask", *words]


def parent_allows(mode: int, owner: int, uid: int) -> bool:
    """Whether a parent directory of shared_dir keeps others from replacing it: nobody but its owner writes it, or
    it is sticky (others cannot rename what is not theirs) and its owner is root or the login user."""
    return not mode & WRITABLE_BY_OTHERS or (bool(mode & STICKY) and owner in (0, uid))


def shared_dir_problems(where: str, uid_lines: Sequence[str], dir_lines: Sequence[str],
                        foreign: Sequence[str]) -> list[Problem]:
    """The preflight's decision on the shared directory from the login node's lines (:data:`PREFLIGHT_SHARED`)."""
    field = f"{where}: shared_dir"
    uid_text = uid_lines[0].strip() if uid_lines else ""
    if not uid_text.isdigit():
        return [Problem(field, "the login node did not say the login user's uid (id -u)", "check the login shell")]
    uid, problems, seen = int(uid_text), [], set()
    for line in dir_lines:
        parts = line.split(" ", 3)
        if len(parts) != 4 or parts[0] not in ("self", "parent") or not parts[1].isdigit() or \
                not re.fullmatch(r"[0-7]{1,4}", parts[2]) or parts[3] in seen:
            continue
        kind, owner, mode, path = parts[0], int(parts[1]), int(parts[2], 8), parts[3]
        seen.add(path)
        if kind == "self" and owner != uid:
            problems.append(Problem(field, f"{path} is owned by uid {owner}, not by the login user (uid {uid})",
                                    "use a directory of your own as shared_dir (mkdir it; chmod 700)"))
        elif kind == "self" and mode & WRITABLE_BY_OTHERS:
            problems.append(Problem(field, f"{path} is writable by group or others (mode {mode:o})",
                                    f"chmod go-w {path}"))
        elif kind == "parent" and not parent_allows(mode, owner, uid):
            problems.append(Problem(field, f"{path}, a parent of shared_dir, is writable by group or others without "
                                    f"the sticky bit (mode {mode:o}, owner uid {owner}): they could put a directory "
                                    "of theirs in shared_dir's place", f"chmod go-w {path} (or chmod +t, when root "
                                    "owns it), or use a shared_dir under directories only you or root write"))
    if foreign:
        problems.append(Problem(field, f"{foreign[0].strip()} is owned by another user or writable by group or "
                                "others (found in shared_dir)", "remove it, or chown/chmod -R go-w it if you trust "
                                "its contents"))
    return problems


def record_problems(source: str, *, release: str, spec: str, chief_slot: str, shared_dir: str, job_dir: str,
                    slots: Sequence[str]) -> list[Problem]:
    """A record read back from the shared directory (``source``) against the layout: the release is
    <shared_dir>/releases/<64 hex>, the spec <job_dir>/spec-<16 hex>.json, the chief one of the declared slots."""
    fix = "remove it and train again (make train CLUSTER=slurm); someone else may be able to write there"
    problems = []
    prefix = f"{shared_dir}/releases/"
    if not release.startswith(prefix) or not _HEX64.fullmatch(release[len(prefix):]):
        problems.append(Problem(f"{source}: release", f"{release!r} is not {prefix}<sha256>", fix))
    name = spec[len(job_dir) + 1:] if spec.startswith(f"{job_dir}/") else ""
    if not _SPEC.fullmatch(name):
        problems.append(Problem(f"{source}: spec", f"{spec!r} is not {job_dir}/spec-<digest>.json", fix))
    if chief_slot not in slots or "/" in chief_slot or ".." in chief_slot:
        problems.append(Problem(f"{source}: chief_slot", f"{chief_slot!r} is not one of the job's slots "
                                f"({', '.join(slots)})", fix))
    return problems
