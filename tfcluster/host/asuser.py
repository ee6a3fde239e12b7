"""Run a function in a forked child as another user; its JSON result comes back through a pipe. Standard library
only.

Root never follows a path a job controls: where root must act inside the job user's files (the job's home, the model
dir's manifest and DONE), a child drops to that user first, so every open it makes is checked by the kernel as that
user's own.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from typing import Any


def run_as(uid: int, gid: int, work: Callable[[], dict[str, Any]], *, cwd_fd: int | None = None,
           umask: int | None = None, what: str = "the child") -> dict[str, Any]:
    """``work()`` in a child that enters ``cwd_fd`` (when given), sets ``umask`` and drops to ``uid``:``gid`` (no
    drop for uid 0). Returns its result, or ``{"error": ...}`` naming ``what`` when it ended without one."""
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child's outcome comes back through the pipe
        code = 1
        try:
            os.close(reader)
            if cwd_fd is not None:
                os.fchdir(cwd_fd)
            if uid != 0:
                os.setgroups([])
                os.setgid(gid)
                os.setuid(uid)
            if umask is not None:
                os.umask(umask)
            result: dict[str, Any] = work()
            code = 0
        except BaseException as error:
            result = {"error": f"{type(error).__name__}: {error}"}
        finally:
            with contextlib.suppress(BaseException):
                os.write(writer, json.dumps(result).encode())
            os._exit(code)
    os.close(writer)
    with os.fdopen(reader, "rb") as pipe:
        data = pipe.read()
    os.waitpid(child, 0)
    try:
        return json.loads(data)
    except ValueError:
        return {"error": f"{what} ended without a result"}
