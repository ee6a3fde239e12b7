"""A task's Python stacks, read without its help: ``py-spy dump`` of the task's main process (any Python program,
the built-in trainer or a SCRIPT, stuck in a collective or not: py-spy reads the process's memory, so the task need
not run a line; it needs ptrace rights, which root has). Standard library only.

    python3 -m tfcluster.host.stacks SPEC [--unit UNIT]      one JSON line: {"pid", "stacks", "error"}

py-spy is the runtime's (beside the job's Python: the python_runtime role installs it from the hash-pinned lock; a
local slot's is the control machine's venv), else the first on PATH. Its output is capped at STACKS_LIMIT bytes and
PYSPY_TIMEOUT seconds; the control side escapes it before it reaches a terminal (host text is data).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from .jobspec import JobError, load_spec
from .jobstatus import status

PYSPY = "py-spy"
# seconds one dump may take. --nonblocking: py-spy reads the process's memory without pausing it (ptrace), so a task
# is never disturbed and a stopped one (SIGSTOP, a debugger) is read too (an attach fails on it).
PYSPY_TIMEOUT = 30.0
STACKS_LIMIT = 64 * 1024  # bytes of a dump kept


def pyspy_path(spec: Mapping[str, Any]) -> str | None:
    """py-spy beside the job's Python (its venv's bin), else on PATH."""
    argv = spec.get("argv") or []
    if argv and os.path.isabs(str(argv[0])):
        beside = os.path.join(os.path.dirname(str(argv[0])), PYSPY)
        if os.access(beside, os.X_OK):
            return beside
    return shutil.which(PYSPY)


def dump(pyspy: str, pid: int, timeout: float = PYSPY_TIMEOUT) -> tuple[str, str | None]:
    """(the stacks, None) or (what was read, the error)."""
    try:
        proc = subprocess.run([pyspy, "dump", "--nonblocking", "--pid", str(pid)], capture_output=True, timeout=timeout,
                              check=False)
    except subprocess.TimeoutExpired:
        return "", f"py-spy did not answer within {timeout:.0f} s"
    except OSError as error:
        return "", f"py-spy could not start: {error}"
    out = proc.stdout[:STACKS_LIMIT].decode("utf-8", "replace")
    if proc.returncode != 0:
        err = proc.stderr[-2000:].decode("utf-8", "replace").strip().splitlines()
        return out, f"py-spy exited {proc.returncode}: {err[-1] if err else 'no message'}"
    return out, None


def stacks(spec_file: str, unit: str | None = None) -> dict[str, Any]:
    spec = load_spec(spec_file)
    pid = status(spec_file, unit, 0).get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return {"pid": None, "stacks": "", "error": "the task is not running: no process to read"}
    pyspy = pyspy_path(spec)
    if pyspy is None:
        return {"pid": pid, "stacks": "", "error": "py-spy is not installed on this host. Fix: run make train "
                "again (the python_runtime role installs it with the runtime)"}
    text, error = dump(pyspy, pid)
    return {"pid": pid, "stacks": text, "error": error}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m tfcluster.host.stacks", description=__doc__.split("\n")[0])
    parser.add_argument("spec")
    parser.add_argument("--unit", default=None)
    args = parser.parse_args(argv)
    try:
        answer = stacks(args.spec, args.unit)
    except (JobError, OSError) as error:
        answer = {"pid": None, "stacks": "", "error": str(error)}
    print(json.dumps(answer, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
