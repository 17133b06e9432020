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


def read_message(fd):
    """(header, blobs) of the next message on `fd`; EOFError when the pipe closed."""
    (length,) = struct.unpack(">I", read_exact(fd, 4))
    header = json.loads(read_exact(fd, length))
    return header, [read_exact(fd, size) for size in header.get("blobs", [])]


def write_all(fd, data):
    """os.write until all of `data` is written (pipes and files may take part of it)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def write_message(fd, header, blobs=()):
    encoded = json.dumps(dict(header, blobs=[len(blob) for blob in blobs])).encode()
    write_all(fd, b"".join([struct.pack(">I", len(encoded)), encoded, *blobs]))
