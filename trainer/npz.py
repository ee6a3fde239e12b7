"""Reading .npz files fast and without copies. numpy and the standard library only.

``np.load`` inflates each member through ``zipfile`` in small chunks, holding the GIL for most of it, and copies
each array out of the stream. Here each member is inflated with one ``zlib.decompress`` call (which releases the
GIL: a load in a thread overlaps TensorFlow's import in the main thread) and the array is a read-only view of the
inflated bytes. The CRC-32 of every member is checked, as ``zipfile`` would.
"""

from __future__ import annotations

import io
import os
import struct
import zipfile
import zlib

import numpy as np

_LOCAL_HEADER = struct.Struct("<4s22xHH")  # signature ... file name length, extra field length


def _member_bytes(handle: io.BufferedReader, info: zipfile.ZipInfo) -> bytes:
    handle.seek(info.header_offset)
    signature, name_length, extra_length = _LOCAL_HEADER.unpack(handle.read(_LOCAL_HEADER.size))
    if signature != b"PK\x03\x04":
        raise ValueError(f"{info.filename}: bad local file header")
    handle.seek(name_length + extra_length, os.SEEK_CUR)
    raw = handle.read(info.compress_size)
    if info.compress_type == zipfile.ZIP_DEFLATED:
        data = zlib.decompress(raw, -zlib.MAX_WBITS, info.file_size)
    elif info.compress_type == zipfile.ZIP_STORED:
        data = raw
    else:
        raise ValueError(f"{info.filename}: compression method {info.compress_type} is not supported")
    if len(data) != info.file_size or zlib.crc32(data) != info.CRC:
        raise ValueError(f"{info.filename}: CRC-32 or size mismatch (a damaged file)")
    return data


def _array(data: bytes) -> np.ndarray:
    stream = io.BytesIO(data)
    version = np.lib.format.read_magic(stream)
    readers = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
    if version not in readers:  # format 3.0 (utf-8 field names): numpy's own reader, with a copy
        return np.lib.format.read_array(io.BytesIO(data), allow_pickle=False)
    shape, fortran, dtype = readers[version](stream)
    if dtype.hasobject:
        raise ValueError("object arrays are not allowed")
    count = int(np.prod(shape, dtype=np.int64))
    flat = np.frombuffer(data, dtype=dtype, count=count, offset=stream.tell())
    return flat.reshape(shape[::-1]).T if fortran else flat.reshape(shape)


def read_arrays(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """Every array of an .npz (``np.savez`` or ``np.savez_compressed``), as read-only arrays; raises ValueError or
    OSError."""
    try:
        with zipfile.ZipFile(path) as archive:
            members = [info for info in archive.infolist() if info.filename.endswith(".npy")]
        with open(path, "rb") as handle:
            return {info.filename[:-len(".npy")]: _array(_member_bytes(handle, info)) for info in members}
    except (zipfile.BadZipFile, zlib.error, struct.error, EOFError) as exc:
        raise ValueError(str(exc)) from exc
