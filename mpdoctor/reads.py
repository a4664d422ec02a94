"""Reading the files a user names, safely: only regular files, never blocking, and capped where a size makes no
sense.

`open()` on a FIFO blocks until a writer comes, and reading /dev/zero never ends; a path found in a directory walk,
given as --config or --baseline, or swapped between a check and the read could be either. So a file is opened
non-blocking, its type is checked on the open descriptor (no race with a rename), and a reader that expects a small
file (a pyproject.toml, a baseline) stops at a limit. Every refusal is an OSError with a readable `strerror`, so the
callers' existing `except OSError` handlers report it in one line.
"""

from __future__ import annotations

import errno
import os
import stat

CONFIG_LIMIT = 16 * 2**20  # a pyproject.toml
BASELINE_LIMIT = 256 * 2**20  # about a million findings
REPORT_LIMIT = 1024 * 2**20  # a JSON report (merge): about a million findings with fixes
SOURCE_LIMIT = 256 * 2**20  # a checked file read again (merge): far more than any source or notebook

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class UnsuitableFile(OSError):
    """Not a regular file, or larger than the reader accepts. `strerror` says which."""

    def __init__(self, path, problem: str) -> None:
        super().__init__(errno.EINVAL, problem, os.fspath(path))


def kind_of(mode: int) -> str:
    """'a FIFO', 'a character device'...: what a non-regular file is, for messages."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def not_regular(mode: int) -> str | None:
    """The refusal message for a file of this mode, or None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    return f"not a regular file ({kind_of(mode)})"


def regular_file_problem(path) -> str | None:
    """Why `path` (named on the command line) cannot be read as a file, or None when it is a regular file."""
    try:
        return not_regular(os.stat(path).st_mode)
    except FileNotFoundError:
        return "no such file"
    except OSError as exc:
        return f"cannot read: {exc.strerror or exc}"


def check_regular(path) -> None:
    """Raise UnsuitableFile (or the OSError of stat) unless `path` is a regular file, following symlinks."""
    problem = not_regular(os.stat(path).st_mode)
    if problem:
        raise UnsuitableFile(path, problem)


def read_bytes(path, limit: int | None = None, what: str = "file") -> bytes:
    """The bytes of the regular file `path`. Raises OSError: the usual ones, or UnsuitableFile for a FIFO, device,
    socket or directory, or for a file longer than `limit` bytes (`what` names it in the message)."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)  # non-blocking: opening a FIFO without a writer returns at once
    try:
        problem = not_regular(os.fstat(fd).st_mode)
        if problem:
            raise UnsuitableFile(path, problem)
        chunks = []
        size = 0
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
            size += len(chunk)
            if limit is not None and size > limit:
                raise UnsuitableFile(path, f"too large for a {what} (more than {limit // 2**20} MiB)")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_text(path, limit: int | None = None, what: str = "file", encoding: str = "utf-8") -> str:
    """`read_bytes` decoded; raises UnicodeDecodeError for text that is not `encoding`."""
    return read_bytes(path, limit, what).decode(encoding)
