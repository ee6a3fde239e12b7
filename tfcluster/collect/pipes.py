"""The pipes of one tar stream's ssh: its stdout widened and read ahead on a thread (:class:`Prefetch`, issue 23), its
stderr drained on a thread keeping only the last :data:`STDERR_KEEP` bytes (:class:`StderrTail`, issue 38: a chief
that makes ssh print without end cannot fill the operator's memory or disk)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import queue
import threading
from typing import IO

from tfcluster.core.files import BLOCK

PIPE_SIZE = 1 << 20  # the stream's pipe (Linux F_SETPIPE_SZ; the default 64 KiB stalls ssh at every block hashed)
PREFETCH_BLOCKS = 16  # blocks read ahead of the receiver per stream (memory: this many BLOCKs at most)
STDERR_KEEP = 64 << 10  # bytes of ssh's stderr kept during a collect (the last ones)
STDERR_WAIT = 2.0  # seconds to wait for the end of ssh's stderr once ssh has exited
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)


def widen_pipe(fd: int, size: int = PIPE_SIZE) -> None:
    """Make a pipe hold ``size`` bytes where the system allows it (Linux); elsewhere leave it."""
    with contextlib.suppress(OSError, ValueError):
        fcntl.fcntl(fd, _F_SETPIPE_SZ, size)


class Prefetch:
    """Reads a pipe ahead on a thread, at most ``depth`` blocks, so the sender keeps going while the caller hashes
    and writes. ``read`` returns up to ``size`` bytes (b"" at the end), as a raw pipe does."""

    def __init__(self, raw: IO[bytes], depth: int = PREFETCH_BLOCKS) -> None:
        self.fd = raw.fileno()
        self.blocks: queue.Queue[bytes | OSError] = queue.Queue(maxsize=depth)
        self.pending = b""
        self.ended = False
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="collector-prefetch", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopped.is_set():
            try:
                block: bytes | OSError = os.read(self.fd, BLOCK)
            except OSError as error:
                block = error
            self.blocks.put(block)
            if not block or isinstance(block, OSError):
                return

    def read(self, size: int = -1) -> bytes:
        if not self.pending and not self.ended:
            block = self.blocks.get()
            if isinstance(block, OSError):
                self.ended = True
                raise block
            self.ended = not block
            self.pending = block
        if size < 0 or size >= len(self.pending):
            data, self.pending = self.pending, b""
        else:
            data, self.pending = self.pending[:size], self.pending[size:]
        return data

    def close(self) -> None:
        """Stop reading ahead (the sender was killed or is done); never blocks on a full queue."""
        self.stopped.set()
        while self.thread.is_alive():
            with contextlib.suppress(queue.Empty):
                self.blocks.get(timeout=0.05)


class StderrTail:
    """A pipe for a child's stderr, read on a thread as it comes so the child never blocks on it; only the last
    ``keep`` bytes are kept. ``fd`` is the end to give the child (closed here once it started: :meth:`started`)."""

    def __init__(self, keep: int = STDERR_KEEP) -> None:
        self.keep = max(1, keep)
        self._read, self.fd = os.pipe()
        self._tail = bytearray()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="collector-stderr", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while chunk := os.read(self._read, 65536):
                with self._lock:
                    self._tail += chunk
                    del self._tail[:-self.keep]
        except OSError:
            pass
        finally:
            os.close(self._read)

    def started(self) -> None:
        """Close this side's copy of the write end (the child holds its own), so the reader sees the end."""
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1

    def text(self, wait: float = STDERR_WAIT) -> str:
        """What was kept, decoded (waits up to ``wait`` seconds for the end: a process ssh left behind, such as a
        connection master, may hold the pipe open)."""
        self.started()
        self._thread.join(wait)
        with self._lock:
            return bytes(self._tail).decode(errors="replace").strip()
