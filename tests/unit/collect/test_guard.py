"""The collector's memory bounds against a hostile chief (issue 38): tar extension headers over their limit are refused
before tarfile reads them; ssh's stderr is kept to its last 64 KiB."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import tarfile
import time
import tracemalloc
from pathlib import Path

import pytest

from tests.unit.collect.fakes import install_ssh
from tfcluster.collect import guard, pipes, transfer
from tfcluster.core.files import BLOCK
from tfcluster.run.reach import Reach

HOSTILE = 200_000_000  # bytes the hostile header declares
CHIEF = Reach.from_info({"name": "chief-0", "connection": "ssh", "host": "10.0.0.5"})


class Endless:
    """A chief's stdout: ``head``, then zeros up to ``total`` bytes, made as read (the test holds none of it)."""

    def __init__(self, head: bytes, total: int) -> None:
        self.head, self.left, self.served = head, total, 0

    def read(self, size: int = -1) -> bytes:
        size = min(self.left, BLOCK if size < 0 else size)
        data = self.head[:size]
        self.head = self.head[len(data):]
        data = data + bytes(size - len(data)) if data else bytes(size)
        self.left -= len(data)
        self.served += len(data)
        return data


def header(kind: bytes, size: int, name: str = "././@PaxHeader", fmt: int = tarfile.USTAR_FORMAT) -> bytes:
    """One 512-byte tar header of type ``kind`` declaring ``size`` bytes (GNU_FORMAT: base-256 past 8 GiB)."""
    info = tarfile.TarInfo(name)
    info.type, info.size = kind, size
    return info.tobuf(format=fmt)


def received(stream: object, wanted: dict[str, transfer.Wanted], staging: Path, cap: int = 1 << 40) -> tuple[int, int]:
    staging.mkdir(exist_ok=True)
    return transfer.receive(stream, staging, wanted, transfer.Budget(cap, "chief-0"))  # type: ignore[arg-type]


def peak_of(run: object) -> tuple[int, BaseException | None]:
    """The peak of Python's allocations while ``run()`` runs, and what it raised."""
    tracemalloc.start()
    raised: BaseException | None = None
    try:
        run()  # type: ignore[operator]
    except Exception as error:  # the caller asserts what it was
        raised = error
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak, raised


def test_a_200_mb_pax_header_fails_fast_with_bounded_memory(tmp_path: Path) -> None:
    stream = Endless(header(tarfile.XHDTYPE, HOSTILE), HOSTILE + 4096)
    started = time.monotonic()
    peak, raised = peak_of(lambda: received(stream, {"DONE": transfer.Wanted(None, 1)}, tmp_path / "s"))
    assert isinstance(raised, transfer.CollectError), raised
    message = str(raised)
    assert "chief-0" in message and "65,536-byte limit" in message and f"{HOSTILE:,} bytes" in message, message
    assert "PaxHeader" in message, message
    assert peak < 6 << 20, f"peak {peak:,} bytes"  # a few read buffers (3.2 MB measured), never the declared size
    assert stream.served <= 2 * BLOCK and time.monotonic() - started < 5
    assert not any((tmp_path / "s").iterdir())


def test_the_measurement_sees_what_plain_tarfile_holds_for_such_a_header() -> None:
    """The control: without the guard, tarfile reads the declared size into memory (16 MiB here, not 200 MB)."""
    declared = 16 << 20
    stream = Endless(header(tarfile.XHDTYPE, declared), declared + 4096)

    def plain() -> None:
        with tarfile.open(fileobj=stream, mode="r|", bufsize=BLOCK) as archive:  # type: ignore[call-overload]
            list(archive)

    peak, _ = peak_of(plain)
    assert peak >= declared and stream.served >= declared


@pytest.mark.parametrize("kind", [tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE,
                                  tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK])
def test_every_extension_type_over_the_limit_is_refused(tmp_path: Path, kind: bytes) -> None:
    limit = guard.EXTENSION_LIMIT
    stream = Endless(header(kind, limit + 1, "././@LongLink"), limit + 4096)
    with pytest.raises(transfer.CollectError, match=f"declares {limit + 1:,} bytes, over the {limit:,}-byte limit"):
        received(stream, {"DONE": transfer.Wanted(None, 1)}, tmp_path)


def test_a_base_256_size_is_read_as_tarfile_reads_it(tmp_path: Path) -> None:
    huge = 1 << 40  # past the octal field: GNU tar writes it in base 256
    block = header(tarfile.GNUTYPE_LONGNAME, huge, "././@LongLink", fmt=tarfile.GNU_FORMAT)
    assert block[124] & 0x80  # base-256 size field
    with pytest.raises(transfer.CollectError, match=f"declares {huge:,} bytes"):
        received(Endless(block, 1 << 20), {"DONE": transfer.Wanted(None, 1)}, tmp_path)


def test_a_chain_of_extension_headers_is_cut_at_its_limit(tmp_path: Path) -> None:
    one = header(tarfile.XHDTYPE, 16) + b"16 comment=abcd\n".ljust(512, b"\0")
    done = header(tarfile.REGTYPE, 0, "DONE") + bytes(1024)
    stream = io.BytesIO(one * (guard.MAX_EXTENSIONS + 1) + done)
    with pytest.raises(transfer.CollectError, match=f"after {guard.MAX_EXTENSIONS} others in a row"):
        received(stream, {"DONE": transfer.Wanted(None, 0)}, tmp_path / "a")
    stream = io.BytesIO(one * guard.MAX_EXTENSIONS + done)
    assert received(stream, {"DONE": transfer.Wanted(None, 0)}, tmp_path / "b") == (1, 0)  # at the limit: taken


def long_name_tar(name: str, data: bytes, fmt: int) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as archive:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.mark.parametrize("fmt", [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT])
def test_a_long_name_still_extracts(tmp_path: Path, fmt: int) -> None:
    name = "/".join(["d" * 60] * 5) + "/ckpt.data"  # over 300 characters: a PAX or GNU long-name header
    data = os.urandom(5000)
    stream = long_name_tar(name, data, fmt)
    assert (b"././@LongLink" if fmt == tarfile.GNU_FORMAT else b"PaxHeader") in stream
    assert received(io.BytesIO(stream), {name: transfer.Wanted(None, len(data))}, tmp_path) == (1, len(data))
    assert (tmp_path / name).read_bytes() == data


def test_a_header_at_the_limit_still_extracts(tmp_path: Path) -> None:
    value = "v" * (guard.EXTENSION_LIMIT - len(" comment=\n") - 5)
    record = f"{len(value) + 15} comment={value}\n"
    assert len(record) == guard.EXTENSION_LIMIT
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as archive:
        info = tarfile.TarInfo("DONE")
        info.size, info.pax_headers = 3, {"comment": value}
        archive.addfile(info, io.BytesIO(b"{}\n"))
    assert received(io.BytesIO(buf.getvalue()), {"DONE": transfer.Wanted(None, 3)}, tmp_path) == (1, 3)


def test_gnu_tar_s_own_long_names_pass(tmp_path: Path) -> None:
    """What the chief runs (tar_command: GNU tar's default format) with a 300-character name."""
    src = tmp_path / "model"
    name = "/".join(["x" * 70] * 4) + "/v.data"
    (src / name).parent.mkdir(parents=True)
    (src / name).write_bytes(b"weights" * 100)
    stream = subprocess.run(transfer.tar_command(str(src), [name]), capture_output=True, check=True).stdout
    digest = hashlib.sha256(b"weights" * 100).hexdigest()
    assert received(io.BytesIO(stream), {name: transfer.Wanted(digest, 700)}, tmp_path / "in") == (1, 700)


def test_the_collect_names_the_host_and_the_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through ssh: a chief whose tar sends a 200 MB PAX header; the stream is cut at once, nothing is written."""
    (tmp_path / "head").write_bytes(header(tarfile.XHDTYPE, HOSTILE))
    bin_dir = install_ssh(tmp_path / "bin", f"#!/bin/sh\ncat {tmp_path / 'head'}\nexec head -c {HOSTILE} /dev/zero\n")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    wanted = {"DONE": transfer.Wanted(None, 3)}
    started = time.monotonic()
    with pytest.raises(transfer.CollectError, match="65,536-byte limit") as error:
        transfer.stream_from(CHIEF, "/m", tmp_path,
                             wanted, transfer.Budget(1 << 40, "chief-0"), timeout=60)
    assert "chief-0 sent a tar extension header" in str(error.value)
    assert time.monotonic() - started < 20


def test_ssh_s_stderr_is_kept_to_its_last_64_kib() -> None:
    tail = pipes.StderrTail()
    noisy = "import sys; sys.stderr.write('x' * (8 << 20)); sys.stderr.write('the end: Permission denied')"
    proc = subprocess.Popen([sys.executable, "-c", noisy], stderr=tail.fd)
    tail.started()
    assert proc.wait(timeout=30) == 0
    text = tail.text()
    assert text.endswith("the end: Permission denied") and len(text) == pipes.STDERR_KEEP


def test_a_failed_stream_says_the_end_of_ssh_s_stderr(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = install_ssh(tmp_path / "bin", "#!/bin/sh\nhead -c 5000000 /dev/zero >&2\n"
                          "echo 'Host key verification failed.' >&2\nexit 255\n")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    with pytest.raises(transfer.CollectError, match="Host key verification failed") as error:
        transfer.stream_from(CHIEF, "/m", tmp_path,
                             {"DONE": transfer.Wanted(None, 3)}, transfer.Budget(1 << 20, "chief-0"), timeout=60)
    assert len(str(error.value)) < 1000
