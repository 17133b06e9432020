"""The message framing between the sandbox and its workers, used by both sides (the
worker imports this file by path, as it imports nothing else of microcoder).

A message: 4-byte big-endian header length, a JSON header whose "blobs" lists the byte
lengths of the binary parts that follow, then those parts.
"""

import json
import os
import struct


def read_exact(fd, size):
    chunks = []
    while size:
        chunk = os.read(fd, min(size, 1 << 20))
        if not chunk:
            raise EOFError("the other side closed the pipe")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


FIRST_READ_BYTES = 1 << 16


def read_message(fd):
    """(header, blobs) of the next message on `fd`; EOFError when the pipe closed.

    The two sides take turns (one request, one reply), so nothing follows a message on
    the pipe until it is answered: the first read takes up to 64 KiB, which is usually
    the whole message in one system call (and, in the sandbox's threads, one release of
    the GIL instead of one per part)."""
    data = os.read(fd, FIRST_READ_BYTES)
    if not data:
        raise EOFError("the other side closed the pipe")
    if len(data) < 4:
        data += read_exact(fd, 4 - len(data))
    (length,) = struct.unpack(">I", data[:4])
    if len(data) < 4 + length:
        data += read_exact(fd, 4 + length - len(data))
    header = json.loads(data[4 : 4 + length])
    sizes = header.get("blobs", [])
    end = 4 + length + sum(sizes)
    if len(data) > end:
        raise ValueError(f"{len(data) - end} bytes after a message: the two sides are out of step")
    if len(data) < end:
        data += read_exact(fd, end - len(data))
    blobs, offset = [], 4 + length
    for size in sizes:
        blobs.append(data[offset : offset + size])
        offset += size
    return header, blobs


def write_all(fd, data):
    """os.write until all of `data` is written (pipes and files may take part of it)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def write_message(fd, header, blobs=()):
    encoded = json.dumps(dict(header, blobs=[len(blob) for blob in blobs])).encode()
    write_all(fd, b"".join([struct.pack(">I", len(encoded)), encoded, *blobs]))
