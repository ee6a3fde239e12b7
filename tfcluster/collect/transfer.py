"""Moving a model dir's files home, bounded: the tar stream from the chief, or a direct copy from a local slot.

Used by :mod:`tfcluster.collect.ssh` (and :mod:`tfcluster.collect.s3` for the byte budget and the hashed write). Every
byte read counts against a :class:`Budget`; only the regular files asked for, at the size the chief reported, are
written; the sha256 of each is computed while it is written. Every name read from a stream is compared raw (never
normalised first) and must pass :func:`tfcluster.core.files.rel_problem`; every file is created below the staging dir
through descriptors opened with ``O_NOFOLLOW`` (:func:`open_inside`), so nothing is written outside it.

Speed (issue 23): the members are split into up to ``MAX_STREAMS`` tar streams, one SSH connection each, when more
than one of them is big (:func:`plan_streams`: each stream's own ssh decrypts on its own core); each stream's pipe is
widened and read ahead on a thread (:class:`Prefetch`), so ssh keeps decrypting while the receiver hashes and writes;
a big file's pages are sent to disk while it is still arriving (:class:`_Writer`), so the fsync before the copy is
installed finds little left to write. Every stream is checked as one: the names it holds must be the ones asked of
it, each at its size and sha256.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import queue
import stat
import subprocess
import tarfile
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from tfcluster.collect.guard import CollectError, guarded_tarinfo
from tfcluster.collect.pipes import Prefetch, StderrTail, widen_pipe
from tfcluster.core.files import BLOCK, ManifestError, check_received, quote_name, rel_problem
from tfcluster.run.reach import Reach

THREADED_WRITE = 16 << 20  # files at least this big are written by a second thread while the next block is hashed
WRITEBACK_EVERY = 64 << 20  # a threaded file's written pages go to disk every this many bytes (fdatasync, a thread)
TAR_HEADER = 512
MAX_STREAMS = 4  # tar streams (SSH connections) at most
PARALLEL_MIN = 64 << 20  # a member this big gets a stream of its own, when there are more such members


@dataclass(frozen=True)
class Wanted:
    """A file to bring home: its manifest sha256 (None: any content) and the size the chief reported."""

    sha256: str | None
    size: int
    required: bool = True


class Budget:
    """Counts bytes against a cap, shared by every stream of a collect."""

    def __init__(self, cap: int, what: str) -> None:
        self.cap, self.what, self.used = cap, what, 0
        self._lock = threading.Lock()

    def take(self, count: int) -> None:
        with self._lock:
            self.used += count
            used = self.used
        if used > self.cap:
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
    """Writes blocks on a second thread while the caller reads and hashes the next one; every WRITEBACK_EVERY bytes
    a third thread sends the written pages to disk (fdatasync), so the disk works while the stream still runs."""

    def __init__(self, out: IO[bytes]) -> None:
        self.out = out
        self.blocks: queue.Queue[bytes | None] = queue.Queue(maxsize=8)
        self.failures: list[OSError] = []
        self.due = threading.Event()
        self.done = False
        self.thread = threading.Thread(target=self._run, name="collector-writer", daemon=True)
        self.flusher = threading.Thread(target=self._flush, name="collector-writeback", daemon=True)
        self.thread.start()
        self.flusher.start()

    def _run(self) -> None:
        written = 0
        while (block := self.blocks.get()) is not None:
            if not self.failures:  # after a failure keep draining, so the reader never blocks on a full queue
                try:
                    self.out.write(block)
                except OSError as error:
                    self.failures.append(error)
                written += len(block)
                if written >= WRITEBACK_EVERY:
                    written = 0
                    self.due.set()

    def _flush(self) -> None:
        while True:
            self.due.wait()
            self.due.clear()
            if self.done:
                return
            with contextlib.suppress(OSError, ValueError):  # the final fsync (store.install) reports for real
                os.fdatasync(self.out.fileno())

    def put(self, block: bytes) -> None:
        self.blocks.put(block)

    def close(self) -> None:
        self.blocks.put(None)
        self.thread.join()
        self.done = True
        self.due.set()
        self.flusher.join()
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
    a member not asked for, a name that fails the rule, a link, a device, a sparse file, another size, an extension
    header over its limit (:func:`tfcluster.collect.guard.guarded_tarinfo`, checked before it is read)."""
    digests: dict[str, str] = {}
    size = 0
    with tarfile.open(fileobj=CountingReader(stream, budget), mode="r|", bufsize=BLOCK,  # type: ignore[call-overload]
                      tarinfo=guarded_tarinfo(budget.what)) as archive:
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


def plan_streams(wanted: Mapping[str, Wanted], streams: int = MAX_STREAMS,
                 parallel_min: int | None = None) -> list[list[str]]:
    """The members split into tar streams: one stream unless at least two members are ``parallel_min`` bytes or more;
    else up to ``streams`` (one per big member at most), each member on the stream with the fewest bytes so far,
    biggest first (``parallel_min`` defaults to PARALLEL_MIN). Every name is on exactly one stream; each list is
    sorted."""
    least = PARALLEL_MIN if parallel_min is None else parallel_min
    big = sum(1 for want in wanted.values() if want.size >= least)
    count = max(1, min(streams, big)) if big >= 2 else 1
    loads = [0] * count
    groups: list[list[str]] = [[] for _ in range(count)]
    for name in sorted(wanted, key=lambda n: (-wanted[n].size, n)):
        index = loads.index(min(loads))
        groups[index].append(name)
        loads[index] += wanted[name].size
    return [sorted(group) for group in groups if group]


class _Streams:
    """The running ssh processes of one collect: a timeout or the first failure kills them all."""

    def __init__(self, timeout: float) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []
        self.lock = threading.Lock()
        self.timed_out = threading.Event()
        self.failed = threading.Event()
        self.timer = threading.Timer(timeout, self._expire)
        self.timeout = timeout

    def _expire(self) -> None:
        self.timed_out.set()
        self.kill()

    def kill(self) -> None:
        with self.lock:
            for proc in self.procs:
                with contextlib.suppress(OSError):
                    proc.kill()

    def add(self, proc: subprocess.Popen[bytes]) -> None:
        with self.lock:
            self.procs.append(proc)
            stop = self.failed.is_set() or self.timed_out.is_set()
        if stop:
            proc.kill()

    def fail(self) -> None:
        self.failed.set()
        self.kill()

    def past_timeout(self) -> CollectError:
        return CollectError(f"the transfer ran past collector_timeout={self.timeout:.0f} s: cut off. Fix: raise "
                            "collector_timeout for a big model dir")


def stream_from(reach: Reach, model_dir: str, staging: Path, wanted: Mapping[str, Wanted], budget: Budget, *,
                timeout: float, ciphers: str = "", streams: int = MAX_STREAMS) -> tuple[int, int]:
    """Run ``tar`` on the chief (as the job user) and :func:`receive` its output, in up to ``streams`` streams
    (:func:`plan_streams`) at once; every stream killed after ``timeout``, all of them on the first failure."""
    extra = [*(["-o", f"Ciphers={ciphers}"] if ciphers else []), "-o", "Compression=no"]
    groups = plan_streams(wanted, streams)
    running = _Streams(timeout)

    def one(names: list[str]) -> tuple[int, int]:
        argv = reach.argv(tar_command(model_dir, names), extra_ssh_options=extra)
        return _stream(argv, staging, {name: wanted[name] for name in names}, budget, running)

    running.timer.start()
    try:
        if len(groups) == 1:
            return one(groups[0])
        with ThreadPoolExecutor(max_workers=len(groups), thread_name_prefix="collector-stream") as pool:
            results = list(pool.map(_first_failure_stops(one, running), groups))
    finally:
        running.timer.cancel()
    errors = [r for r in results if isinstance(r, Exception)]
    if errors:  # the first real failure, not a stream killed because of it
        raise next((e for e in errors if not isinstance(e, _Stopped)), errors[0])
    done = [r for r in results if isinstance(r, tuple)]
    return sum(files for files, _ in done), sum(size for _, size in done)


class _Stopped(CollectError):
    """A stream killed because another one failed."""


def _first_failure_stops(one: Callable[[list[str]], tuple[int, int]],
                         running: _Streams) -> Callable[[list[str]], tuple[int, int] | Exception]:
    def run(names: list[str]) -> tuple[int, int] | Exception:
        try:
            return one(names)
        except (CollectError, ManifestError, OSError) as error:
            if running.failed.is_set() and not running.timed_out.is_set():
                return _Stopped(f"stopped after another stream failed: {error}")
            running.fail()
            return error
    return run


def _stream(argv: list[str], staging: Path, wanted: Mapping[str, Wanted], budget: Budget,
            running: _Streams) -> tuple[int, int]:
    """One tar stream: ``argv`` (ssh ... tar) received into ``staging``; raises CollectError naming the cause (and
    the end of ssh's stderr: only its last STDERR_KEEP bytes are kept)."""
    errors = StderrTail()
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=errors.fd)
    finally:
        errors.started()
    with proc:
        running.add(proc)
        assert proc.stdout is not None
        widen_pipe(proc.stdout.fileno())
        source = Prefetch(proc.stdout)
        try:
            received = receive(source, staging, wanted, budget)  # type: ignore[arg-type]
            code = proc.wait()
        except (CollectError, ManifestError, tarfile.TarError, OSError) as error:
            proc.kill()
            code = proc.wait()
            if running.timed_out.is_set():
                raise running.past_timeout() from None
            reason = f"`tar` on the chief exited {code}" if code > 0 and not isinstance(error, CollectError) else ""
            raise CollectError(f"{reason or error}{_stderr_of(errors)}") from None
        finally:
            source.close()
        if code != 0:
            if running.timed_out.is_set():
                raise running.past_timeout()
            raise CollectError(f"`{argv[0]} ... tar` exited {code}{_stderr_of(errors)}")
    return received


def _stderr_of(errors: StderrTail) -> str:
    text = errors.text()
    return f" ({text[-600:]})" if text else ""
