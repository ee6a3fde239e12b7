"""Run a command on this machine and read its output bounded: at most STDOUT_LIMIT bytes of stdout and
STDERR_LIMIT of stderr are kept (the rest is read and dropped, so the command never blocks on a full pipe), decoded
with U+FFFD for a bad byte, and the command is killed at its time limit. What a host sends back is data: the wait's
status polls and the stacks of a stuck job are read this way.
"""

from __future__ import annotations

import os
import selectors
import subprocess
import time

STDOUT_LIMIT = 1024 * 1024  # bytes of a host's status answer read (one JSON line; its log tail is 64 KiB at most)
STDERR_LIMIT = 64 * 1024  # bytes of its stderr read (ssh's last line says why it failed)
STDERR_GRACE = 1.0  # seconds stderr may stay open once the command ended and closed stdout (an ssh master's)
CLOSE_GRACE = 2.0  # seconds the hosts' status sessions have to end once the wait hung up, before they are killed


def read_bounded(argv: list[str], timeout: float) -> tuple[int, str, str, bool]:
    """Run ``argv``: (exit status, stdout, stderr, whether stdout was over STDOUT_LIMIT). At most STDOUT_LIMIT and
    STDERR_LIMIT bytes are kept (the rest is read and dropped: the command never blocks on a full pipe), decoded
    with U+FFFD for a bad byte. subprocess.TimeoutExpired (the command killed) after ``timeout`` s."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    kept = {proc.stdout: bytearray(), proc.stderr: bytearray()}
    limits = {proc.stdout: STDOUT_LIMIT, proc.stderr: STDERR_LIMIT}
    over, deadline = False, time.monotonic() + timeout
    try:
        with selectors.DefaultSelector() as selector:
            for pipe in kept:
                selector.register(pipe, selectors.EVENT_READ)
            while selector.get_map():
                ended = proc.stdout not in selector.get_map() and proc.poll() is not None
                left = deadline - time.monotonic()
                if left <= 0:
                    raise subprocess.TimeoutExpired(argv, timeout)
                ready = selector.select(min(left, STDERR_GRACE) if ended else left)
                if not ready and ended:
                    break
                for key, _ in ready:
                    chunk = os.read(key.fd, 64 * 1024)
                    if not chunk:
                        selector.unregister(key.fileobj)
                        continue
                    buffer, pipe = kept[key.fileobj], key.fileobj
                    room = max(0, limits[pipe] - len(buffer))
                    buffer += chunk[:room]
                    over = over or (pipe is proc.stdout and len(chunk) > room)
        code = proc.wait(max(0.1, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    out, err = (bytes(kept[pipe]).decode("utf-8", "replace") for pipe in (proc.stdout, proc.stderr))
    return code, out, err, over
