"""The collector's error, and what bounds its memory against a hostile chief (issue 38).

Python's ``tarfile`` reads a PAX (``x``, ``g``, Solaris ``X``) or GNU long-name/long-link (``L``, ``K``) header's whole
declared size into memory before it looks at it: a 512-byte header that declares 200 MB makes the receiver hold
200 MB. :func:`guarded_tarinfo` gives the stream a ``TarInfo`` class that refuses such a header over
:data:`EXTENSION_LIMIT` bytes (and a chain of more than :data:`MAX_EXTENSIONS` of them before one member) once
``tarfile`` has parsed its 512 bytes, before it reads the declared size. The check sits in ``tarfile``'s own dispatch,
not in a second parser of the stream, so it sees exactly the headers ``tarfile`` acts on (a directory's or a PAX
``size`` record's data length, V7 directories, sparse maps: nothing can shift a second parser out of step).
"""

from __future__ import annotations

import tarfile

from tfcluster.core.files import quote_name

EXTENSION_LIMIT = 64 << 10  # bytes of one PAX or GNU long-name/long-link header's data, at most
MAX_EXTENSIONS = 8  # extension headers in a row before one member, at most (GNU tar writes 2, PAX 1 or 2)
EXTENSION_TYPES = frozenset({tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE, tarfile.GNUTYPE_LONGNAME,
                             tarfile.GNUTYPE_LONGLINK})


class CollectError(ValueError):
    """Collecting failed; the message names the host, the file or the limit, and the fix."""


class ExtensionGuard(tarfile.TarInfo):
    """A ``TarInfo`` that refuses an extension header before ``tarfile`` reads its data when the header declares more
    than ``limit`` bytes (or a negative size), or when it is the ``most``-plus-first in a row. Per stream: use
    :func:`guarded_tarinfo`, which makes a subclass holding the host's name and the count of one stream."""

    where = "the chief"
    limit = EXTENSION_LIMIT
    most = MAX_EXTENSIONS
    depth = 0  # extension headers being processed now (tarfile reads a chain recursively)

    def _proc_member(self, archive: tarfile.TarFile) -> tarfile.TarInfo:
        """``tarfile``'s dispatch on the header just parsed (its 512 bytes only), checked first."""
        if self.type not in EXTENSION_TYPES:
            return super()._proc_member(archive)  # type: ignore[attr-defined]
        kind = type(self)
        header = f"{kind.where} sent a tar extension header ({self.type.decode(errors='replace')}, " \
                 f"{quote_name(self.name)})"
        if not 0 <= self.size <= kind.limit:
            raise CollectError(f"{header} that declares {self.size:,} bytes, over the {kind.limit:,}-byte limit on "
                               "tar extension headers: refusing it before reading it")
        if kind.depth >= kind.most:
            raise CollectError(f"{header} after {kind.most} others in a row, over the limit of {kind.most}: "
                               "refusing it")
        kind.depth += 1
        try:
            return super()._proc_member(archive)  # type: ignore[attr-defined]
        finally:
            kind.depth -= 1


def guarded_tarinfo(where: str, limit: int = EXTENSION_LIMIT, most: int = MAX_EXTENSIONS) -> type[ExtensionGuard]:
    """The ``tarinfo`` class for one tar stream from ``where`` (a class per stream: its count is that stream's).
    Fails closed on a Python whose tarfile has no ``TarInfo._proc_member`` (the hook would never run)."""
    if not callable(getattr(tarfile.TarInfo, "_proc_member", None)):
        raise CollectError("this Python's tarfile has no TarInfo._proc_member, so the limit on tar extension headers "
                           "cannot be enforced: refusing to read the stream (run the collector on Python 3.11-3.13)")
    return type("ExtensionGuard", (ExtensionGuard,), {"where": where, "limit": limit, "most": most, "depth": 0})
