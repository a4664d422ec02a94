"""Every file mpdoctor writes goes through here: reports (-o, --html), baselines, --fix, convert-checkpoint.

One way to write: a temporary file in the destination's folder, fsync, then a rename over the destination, so a
reader never sees half a file and a failure (a full disk, a signal) leaves the old file as it was. The new file
looks like the old one was written in place: its mode, its owner and group (when the process may set them), its
extended attributes; a file that has other hard links is rewritten in place through the link (after the temporary
copy proved the whole content can be written), so the links keep sharing it. A new file gets the mode a plain
`open()` would give it (0666 minus the umask), never mkstemp's 0600.

Refused, as an OSError whose `strerror` says why: a destination that is one of the files being checked in this run
(`--write-baseline keep.py` after a forgotten file argument must not replace the user's source with JSON), a
directory, and an existing file the user cannot write. A FIFO or a character device (`-o /dev/stdout`) is written
directly: there is nothing to replace, and a FIFO without a reader is an error instead of a hang.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from collections.abc import Iterable, Iterator


class WriteRefused(OSError):
    """mpdoctor will not write there; `strerror` says why."""

    def __init__(self, path, problem: str) -> None:
        super().__init__(errno.EPERM, problem, os.fspath(path))


class FileChanged(OSError):
    """The destination no longer holds what the caller expected (it changed since it was read)."""

    def __init__(self, path) -> None:
        super().__init__(errno.EAGAIN, "changed since it was analysed; not touched", os.fspath(path))


def umask() -> int:
    """The process's umask, read without changing it where Linux shows it (no window for another thread)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def new_file_mode(directory: bool = False) -> int:
    """The mode `open()` / `mkdir()` would give a new file or directory."""
    return (0o777 if directory else 0o666) & ~umask()


def write_atomic(
    path, data: bytes | str, *, expect: bytes | None = None, refuse: Iterable = (), encoding: str = "utf-8"
) -> None:
    """Write `data` (str: encoded with `encoding`; characters it cannot encode are backslash-escaped) to `path`.
    `expect`: the bytes the file must still hold right before it is replaced (else FileChanged). `refuse`: paths
    that must not be overwritten (the files checked in this run)."""
    if isinstance(data, str):
        data = data.encode(encoding, errors="backslashreplace")
    try:
        info = os.stat(path)  # through symlinks: /dev/stdout is a link to the terminal or pipe
    except FileNotFoundError:
        info = None
    if info is not None and not stat.S_ISREG(info.st_mode) and not stat.S_ISDIR(info.st_mode):
        _write_special(path, info, data)
        return
    target = _destination(path, refuse)
    with staged_file(target, refuse=refuse) as staged:
        with open(staged, "wb") as handle:
            handle.write(data)
        if expect is not None and _current(target) != expect:
            raise FileChanged(path)


@contextlib.contextmanager
def staged_file(path, *, refuse: Iterable = ()) -> Iterator[str]:
    """Yields the path of an empty temporary file beside `path` for the caller to fill (h5py, TensorFlow); when the
    block ends without an exception it is published over `path` (see `publish`), else removed."""
    target = _destination(path, refuse)
    directory = os.path.dirname(target) or "."
    fd, staged = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=".mpdoctor-tmp", dir=directory)
    os.close(fd)
    try:
        yield staged
        publish(staged, target, refuse=refuse)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(staged)


@contextlib.contextmanager
def staging_directory(near) -> Iterator[str]:
    """A temporary directory beside `near` (same file system, so its files can be renamed into place), removed
    afterwards with whatever the caller did not publish."""
    import shutil

    parent = os.path.dirname(os.path.abspath(near))
    directory = tempfile.mkdtemp(prefix=f".{os.path.basename(near)}.", suffix=".mpdoctor-tmp", dir=parent)
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def publish(staged, path, *, refuse: Iterable = ()) -> None:
    """Move the finished file `staged` (in the destination's folder) over `path`: fsync, metadata of the file it
    replaces (or a new file's mode), rename, fsync of the folder. A destination with other hard links is rewritten
    in place instead, as is one whose owner this process cannot give the new file."""
    target = _destination(path, refuse)
    fsync_file(staged)
    try:
        info = os.stat(target)
    except FileNotFoundError:
        os.chmod(staged, new_file_mode())
        os.replace(staged, target)
        fsync_directory(os.path.dirname(target) or ".")
        return
    problem = _refusal(target, info)
    if problem:
        raise WriteRefused(path, problem)
    if info.st_nlink > 1 or not _take_metadata(staged, target, info):
        _rewrite_in_place(staged, target)
        return
    os.replace(staged, target)
    fsync_directory(os.path.dirname(target) or ".")


def publish_directory(staged, path) -> None:
    """Move the finished directory `staged` to `path` (which must not exist), with a new directory's mode."""
    os.chmod(staged, new_file_mode(directory=True))
    os.rename(staged, path)
    fsync_directory(os.path.dirname(os.path.abspath(path)))


def fsync_directory(path) -> None:
    """Make a rename in `path` durable (where directories can be opened; not on Windows)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# -------------------------------------------------------------------------------------------------- internals


def refusal(path, refuse: Iterable) -> str | None:
    """Why `path` must not be written (a directory, or the same file as one of `refuse`), or None. For a caller
    that wants to refuse before a long run, not only when it writes."""
    target = os.path.realpath(path)
    if os.path.isdir(target):
        return "is a directory"
    if any(_same_file(target, other) for other in refuse):
        return "is one of the files being checked; not overwritten"
    return None


def _same_file(target: str, other) -> bool:
    # Only the comparison is guarded: a refusal raised inside `suppress(OSError)` (WriteRefused is an OSError)
    # would be swallowed, and the file written over (issue 32, item 02).
    try:
        return os.path.samefile(target, other)
    except OSError:  # one of them does not exist (yet): not the same file
        return False


def _destination(path, refuse: Iterable) -> str:
    """The file to write: symlinks followed (a link keeps pointing at the new content), checked against `refuse`."""
    problem = refusal(path, refuse)
    if problem:
        raise WriteRefused(path, problem)
    return os.path.realpath(path)


def _refusal(target: str, info: os.stat_result) -> str | None:
    if not stat.S_ISREG(info.st_mode):
        return "not a regular file"
    if not os.access(target, os.W_OK):
        return "read-only"
    return None


def _current(target: str) -> bytes | None:
    try:
        with open(target, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def fsync_file(path) -> None:
    """Flush a finished file's data to disk (before it is renamed into place)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _take_metadata(staged: str, target: str, info: os.stat_result) -> bool:
    """Give `staged` the owner, group, mode and extended attributes of `target`; False when the owner cannot be
    kept (the caller then writes in place, which keeps everything)."""
    if hasattr(os, "chown"):
        here = os.stat(staged)
        if (here.st_uid, here.st_gid) != (info.st_uid, info.st_gid):
            try:
                os.chown(staged, info.st_uid, info.st_gid)
            except PermissionError:
                return False
    os.chmod(staged, stat.S_IMODE(info.st_mode))  # after chown, which clears set-id bits
    for name in _xattrs(target):
        # security.* and trusted.* need privileges; a file system may not support extended attributes at all
        with contextlib.suppress(OSError):
            os.setxattr(staged, name, os.getxattr(target, name, follow_symlinks=False), follow_symlinks=False)
    return True


def _xattrs(path: str) -> list[str]:
    if not hasattr(os, "listxattr"):
        return []
    try:
        return os.listxattr(path)
    except OSError:
        return []


def _rewrite_in_place(staged: str, target: str) -> None:
    """Copy `staged` into `target` through its own inode. Not atomic: if the copy fails, the old content (read
    first) is written back."""
    with open(target, "rb") as handle:
        old = handle.read()
    with open(staged, "rb") as source, open(target, "r+b") as destination:
        try:
            while chunk := source.read(1 << 20):
                destination.write(chunk)
            destination.truncate()
            destination.flush()
            os.fsync(destination.fileno())
        except BaseException:
            destination.seek(0)
            destination.write(old)
            destination.truncate()
            raise


def _write_special(target: str, info: os.stat_result, data: bytes) -> None:
    """A FIFO or character device: written directly. A FIFO is opened non-blocking, so without a reader this is
    ENXIO at once instead of a hang; a socket or block device is refused."""
    if not (stat.S_ISFIFO(info.st_mode) or stat.S_ISCHR(info.st_mode)):
        raise WriteRefused(target, "not a regular file, a FIFO or a character device")
    flags = os.O_WRONLY | getattr(os, "O_NOCTTY", 0)
    if stat.S_ISFIFO(info.st_mode):
        try:
            fd = os.open(target, flags | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno == errno.ENXIO:
                raise WriteRefused(target, "a FIFO that nothing reads") from None
            raise
        os.set_blocking(fd, True)
    else:
        fd = os.open(target, flags)
    with open(fd, "wb") as handle:
        handle.write(data)
