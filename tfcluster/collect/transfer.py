"""Moving a model dir's files home, bounded: the tar stream from the chief, or a direct copy from a local slot.

Used by :mod:`tfcluster.collect.ssh` (and :mod:`tfcluster.collect.s3` for the byte budget and the hashed write). Every
byte read counts against a :class:`Budget`; only the regular files asked for, at the size the chief reported, are
written; the sha256 of each is computed while it is written. Every name read from a stream is compared raw (never
normalised first) and must pass :func:`tfcluster.core.files.rel_problem`; every file is created below the staging dir
through descriptors opened with ``O_NOFOLLOW`` (:func:`open_inside`), so nothing is written outside it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import queue
import stat
import subprocess
import tarfile
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from tfcluster.core.files import BLOCK, ManifestError, check_received, quote_name, rel_problem
from tfcluster.run.reach import Reach

THREADED_WRITE = 16 << 20  # files at least this big are written by a second thread while the next block is hashed
TAR_HEADER = 512


class CollectError(ValueError):
    """Collecting failed; the message names the host, the file or the limit, and the fix."""


@dataclass(frozen=True)
class Wanted:
    """A file to bring home: its manifest sha256 (None: any content) and the size the chief reported."""

    sha256: str | None
    size: int
    required: bool = True


class Budget:
    """Counts bytes against a cap; thread-safe enough for one writer per file."""

    def __init__(self, cap: int, what: str) -> None:
        self.cap, self.what, self.used = cap, what, 0

    def take(self, count: int) -> None:
        self.used += count
        if self.used > self.cap:
            raise CollectError(f"{self.what} sent more than {self.cap:,} bytes (the manifest's size + slack, "
                               "collector_max_bytes and the free space): cut off")


class CountingReader:
    """A pipe that raises once more than its budget was read from it (tar headers and padding included)."""

    def __init__(self, raw: IO[bytes], budget: Budget) -> None:
        self.raw, self.budget = raw, budget

    def read(self, size: int = -1) -> bytes:
        data = self.raw.read(size)
        self.budget.take(len(data))
        return data


_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def checked_name(name: object) -> str:
    """``name`` when it passes the name rule; CollectError naming it (escaped) otherwise."""
    problem = rel_problem(name)
    if problem is not None:
        raise CollectError(f"the member {quote_name(name)} is not a plain path inside the model dir ({problem}): "
                           "refusing it")
    return name  # type: ignore[return-value]


def open_inside(root: Path, rel: str) -> IO[bytes]:
    """A new file ``root/rel`` open for writing, its parent directories made as needed. Refused (CollectError) when
    ``rel`` fails the name rule, when the path does not resolve inside ``root``, when any component below ``root``
    is a symlink (each is opened with O_NOFOLLOW relative to its parent's descriptor) or when the file exists."""
    checked_name(rel)
    base = root.resolve()
    if not (base / rel).resolve().is_relative_to(base):
        raise CollectError(f"{quote_name(rel)} resolves outside the staging dir: refusing it")
    parts = rel.split("/")
    try:
        fd = os.open(base, _DIR_FLAGS)
    except OSError as error:
        raise CollectError(f"the staging dir {base} cannot be opened: {error.strerror}") from None
    try:
        for part in parts[:-1]:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o777, dir_fd=fd)
            nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
        out = os.open(parts[-1], _NEW_FILE_FLAGS, 0o666, dir_fd=fd)
    except OSError as error:
        raise CollectError(f"{quote_name(rel)} cannot be written inside the staging dir without following a link "
                           f"({error.strerror}): refusing it") from None
    finally:
        os.close(fd)
    return os.fdopen(out, "wb")


def write_hashed(source: IO[bytes], root: Path, rel: str, size: int) -> str:
    """Copy exactly ``size`` bytes of ``source`` to ``root/rel`` (:func:`open_inside`); the sha256 of what was
    written. Big files overlap hashing and writing in two threads (both release the GIL)."""
    digest = hashlib.sha256()
    remaining = size
    with open_inside(root, rel) as out:
        writer = _Writer(out) if size >= THREADED_WRITE else None
        try:
            while remaining > 0:
                block = source.read(min(BLOCK, remaining))
                if not block:
                    raise CollectError(f"{rel}: the stream ended {remaining:,} bytes early")
                remaining -= len(block)
                digest.update(block)
                writer.put(block) if writer else out.write(block)
        finally:
            if writer:
                writer.close()
    return digest.hexdigest()


class _Writer:
    """Writes blocks on a second thread while the caller reads and hashes the next one."""

    def __init__(self, out: IO[bytes]) -> None:
        self.out = out
        self.blocks: queue.Queue[bytes | None] = queue.Queue(maxsize=8)
        self.failures: list[OSError] = []
        self.thread = threading.Thread(target=self._run, name="collector-writer", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while (block := self.blocks.get()) is not None:
            if not self.failures:  # after a failure keep draining, so the reader never blocks on a full queue
                try:
                    self.out.write(block)
                except OSError as error:
                    self.failures.append(error)

    def put(self, block: bytes) -> None:
        self.blocks.put(block)

    def close(self) -> None:
        self.blocks.put(None)
        self.thread.join()
        if self.failures:
            raise self.failures[0]


def _member_problem(member: tarfile.TarInfo, wanted: Mapping[str, Wanted], seen: Mapping[str, str]) -> str | None:
    """Why ``member`` is refused (its raw name, never a normalised one); "" for a parent directory of a wanted file
    (nothing to write); None for a wanted regular file."""
    name = member.name
    problem = rel_problem(name)
    if problem is not None:
        return f"the stream holds {quote_name(name)}, not a plain path inside the model dir ({problem}): refusing it"
    if member.isdir() and any(p.startswith(name + "/") for p in wanted):
        return ""
    if not member.isfile() or member.issparse() or name not in wanted or name in seen:
        return f"the stream holds {quote_name(name)}, which was not asked for (or is not a regular file, or is " \
               "sparse, or came twice): refusing it"
    if member.size != wanted[name].size:
        return f"{name} is {member.size:,} bytes in the stream but {wanted[name].size:,} on the chief: refusing it"
    return None


def receive(stream: IO[bytes], staging: Path, wanted: Mapping[str, Wanted], budget: Budget) -> tuple[int, int]:
    """Unpack a tar stream into ``staging``, hashing as it writes; (files, bytes). Raises on anything unexpected:
    a member not asked for, a name that fails the rule, a link, a device, a sparse file, another size."""
    digests: dict[str, str] = {}
    size = 0
    with tarfile.open(fileobj=CountingReader(stream, budget), mode="r|", bufsize=BLOCK) as archive:  # type: ignore[call-overload]
        for member in archive:
            problem = _member_problem(member, wanted, digests)
            if problem == "":
                continue
            source = archive.extractfile(member) if problem is None else None
            if source is None:
                raise CollectError(problem or f"{quote_name(member.name)} cannot be read from the stream")
            digests[member.name] = write_hashed(source, staging, member.name, member.size)
            size += member.size
    required = {name: want.sha256 for name, want in wanted.items() if want.required}
    check_received(required, digests)
    return len(digests), size


def _open_nofollow(root: Path, rel: str) -> int:
    """An fd of ``root/rel`` opened without following a symlink in any component below ``root`` (non-blocking, so a
    FIFO cannot stall the open)."""
    fd = os.open(root, _DIR_FLAGS)
    try:
        parts = rel.split("/")
        for part in parts[:-1]:
            nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
        return os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0),
                       dir_fd=fd)
    finally:
        os.close(fd)


def copy_local(model_dir: Path, staging: Path, wanted: Mapping[str, Wanted], budget: Budget) -> tuple[int, int]:
    """:func:`receive` for a chief on this machine (a local slot): read each file directly, never via a link; a
    regular file of the size reported, or the collect fails."""
    digests: dict[str, str] = {}
    size = 0
    for name in sorted(wanted):
        try:
            fd = _open_nofollow(model_dir, checked_name(name))
        except OSError:
            continue  # check_received names a required one
        with os.fdopen(fd, "rb") as source:
            info = os.fstat(source.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise CollectError(f"{name} on the chief is not a regular file: refusing it")
            if info.st_size != wanted[name].size:
                raise CollectError(f"{name} is {info.st_size:,} bytes now but {wanted[name].size:,} when the "
                                   "manifest was read: refusing it (run again once the job is done with it)")
            budget.take(info.st_size)
            digests[name] = write_hashed(source, staging, name, info.st_size)
        size += info.st_size
    check_received({name: want.sha256 for name, want in wanted.items() if want.required}, digests)
    return len(digests), size


def tar_overhead(files: int) -> int:
    """Bytes a tar of ``files`` members adds to their content at most: a header, a long-name header and padding
    each, plus the end blocks and the last record's padding."""
    return 3 * TAR_HEADER * files + 40 * TAR_HEADER


def tar_command(model_dir: str, names: Sequence[str]) -> list[str]:
    """The chief's side: the named files as one tar on stdout; no recursion, no dereference, one filesystem."""
    return ["tar", "--no-recursion", "--one-file-system", "--ignore-failed-read", "-C", model_dir, "-cf", "-",
            "--", *names]


def stream_from(reach: Reach, model_dir: str, staging: Path, wanted: Mapping[str, Wanted], budget: Budget, *,
                timeout: float, ciphers: str = "") -> tuple[int, int]:
    """Run ``tar`` on the chief (as the job user) and :func:`receive` its output; killed after ``timeout``."""
    extra = ["-o", f"Ciphers={ciphers}"] if ciphers else []
    argv = reach.argv(tar_command(model_dir, sorted(wanted)), extra_ssh_options=extra)
    timed_out = threading.Event()
    with tempfile.TemporaryFile() as errors, subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=errors) as proc:
        def kill() -> None:
            timed_out.set()
            proc.kill()

        timer = threading.Timer(timeout, kill)
        timer.start()
        try:
            assert proc.stdout is not None
            received = receive(proc.stdout, staging, wanted, budget)
            code = proc.wait()
        except (CollectError, ManifestError, tarfile.TarError) as error:
            proc.kill()
            code = proc.wait()
            if timed_out.is_set():
                raise CollectError(f"the transfer ran past collector_timeout={timeout:.0f} s: cut off. Fix: raise "
                                   "collector_timeout for a big model dir") from None
            reason = f"`tar` on the chief exited {code}" if code > 0 and not isinstance(error, CollectError) else ""
            raise CollectError(f"{reason or error}{_stderr_of(errors)}") from None
        finally:
            timer.cancel()
        if code != 0:
            raise CollectError(f"`{argv[0]} ... tar` exited {code}{_stderr_of(errors)}")
    return received


def _stderr_of(handle: IO[bytes]) -> str:
    handle.seek(0)
    text = handle.read().decode(errors="replace").strip()
    return f" ({text[-600:]})" if text else ""
