"""Reading text sources for the text writers: existence check, transparent decompression (by
fsspec's table of codecs, chosen by the file's extension), byte metering for progress, and line
buffers of bounded size."""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Iterator
from typing import IO


def _check_source(src: str | os.PathLike[str]) -> str:
    src = os.fspath(src)
    if not os.path.isfile(src):
        raise ValueError(f"{src} does not exist or is not a file")
    return src


class _Meter:
    """Reports bytes read from a source file to ``progress(done, total)`` (both passes)."""

    def __init__(self, progress: Callable[[int, int], object], total: int) -> None:
        self.progress, self.total, self.done = progress, int(total), 0

    def add(self, k: int) -> None:
        self.done += k
        self.progress(min(self.done, self.total), self.total)

    def finish(self) -> None:
        self.progress(self.total, self.total)


class _Tracked(io.RawIOBase):
    """A raw file that counts the bytes read from disk into a :class:`_Meter`."""

    def __init__(self, f: io.RawIOBase | io.FileIO, meter: _Meter) -> None:
        self.f, self.meter = f, meter

    def readable(self) -> bool:
        return True

    def readinto(self, b: bytearray | memoryview) -> int | None:  # type: ignore[override]
        k = self.f.readinto(b)
        if k:
            self.meter.add(k)
        return k

    def close(self) -> None:
        self.f.close()
        super().close()


def _open_binary(src: str, meter: _Meter | None = None) -> IO[bytes]:
    """Open a file for reading bytes, decompressed when its extension names a codec
    (``fsspec.utils.infer_compression``: ``.gz``, ``.bz2``, ``.xz``, and ``.zst`` / ``.lz4``
    where their libraries are installed; fsspec's ``compr`` table opens it); with a ``meter``,
    the (compressed) bytes read from disk are counted into it.  Reading a ``.gz`` file
    through takes as long as with ``gzip`` directly (benchmarks/results/libraries.md)."""
    from fsspec.compression import compr
    from fsspec.utils import infer_compression

    disk: io.RawIOBase = open(src, "rb", buffering=0)
    if meter is not None:
        disk = _Tracked(disk, meter)
    raw = io.BufferedReader(disk)
    codec = infer_compression(src)
    if codec is None or codec not in compr or compr[codec] is None:
        return raw
    opened: IO[bytes] = compr[codec](raw, mode="rb")
    return opened


def _line_buffers(
    src: str, buffer_rows: int, buffer_bytes: int, meter: _Meter | None = None
) -> Iterator[tuple[list[bytes], int]]:
    """Yield ``(lines, first_line_number)`` buffers of raw byte lines from a text file."""
    if int(buffer_rows) < 1:
        raise ValueError(f"buffer_rows must be at least 1, got {buffer_rows}")
    with _open_binary(src, meter) as f:
        lines: list[bytes] = []
        size, first = 0, 1
        for line in f:
            lines.append(line)
            size += len(line)
            if len(lines) >= buffer_rows or size >= buffer_bytes:
                yield lines, first
                first += len(lines)
                lines, size = [], 0
        if lines:
            yield lines, first
