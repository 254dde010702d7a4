"""Reading text sources for the text writers: existence check, transparent decompression,
byte metering for progress, and line buffers of bounded size."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os


def _check_source(src):
    src = os.fspath(src)
    if not os.path.isfile(src):
        raise ValueError(f"{src} does not exist or is not a file")
    return src


class _Meter:
    """Reports bytes read from a source file to ``progress(done, total)`` (both passes)."""

    def __init__(self, progress, total):
        self.progress, self.total, self.done = progress, int(total), 0

    def add(self, k):
        self.done += k
        self.progress(min(self.done, self.total), self.total)

    def finish(self):
        self.progress(self.total, self.total)


class _Tracked(io.RawIOBase):
    """A raw file that counts the bytes read from disk into a :class:`_Meter`."""

    def __init__(self, f, meter):
        self.f, self.meter = f, meter

    def readable(self):
        return True

    def readinto(self, b):
        k = self.f.readinto(b)
        if k:
            self.meter.add(k)
        return k

    def close(self):
        self.f.close()
        super().close()


def _open_binary(src, meter=None):
    """Open a file for reading bytes, decompressing ``.gz``, ``.bz2`` and ``.xz`` files; with a
    ``meter``, the (compressed) bytes read from disk are counted into it."""
    raw = None
    if meter is not None:
        raw = io.BufferedReader(_Tracked(open(src, "rb", buffering=0), meter))
    if src.endswith(".gz"):
        return gzip.GzipFile(fileobj=raw, mode="rb") if raw else gzip.open(src, "rb")
    if src.endswith(".bz2"):
        return bz2.BZ2File(raw, "rb") if raw else bz2.open(src, "rb")
    if src.endswith(".xz"):
        return lzma.LZMAFile(raw, "rb") if raw else lzma.open(src, "rb")
    return raw if raw else open(src, "rb")


def _line_buffers(src, buffer_rows, buffer_bytes, meter=None):
    """Yield ``(lines, first_line_number)`` buffers of raw byte lines from a text file."""
    if int(buffer_rows) < 1:
        raise ValueError(f"buffer_rows must be at least 1, got {buffer_rows}")
    with _open_binary(src, meter) as f:
        lines, size, first = [], 0, 1
        for line in f:
            lines.append(line)
            size += len(line)
            if len(lines) >= buffer_rows or size >= buffer_bytes:
                yield lines, first
                first += len(lines)
                lines, size = [], 0
        if lines:
            yield lines, first
