"""Durable writes: nothing servingbench writes is ever seen half-written.

Every output goes through one helper: a temp file with a unique name in the target's own
folder (created exclusively, so two writers never share one and a planted symlink is never
followed), written, fsynced, renamed over the target, and the folder fsynced so the rename
itself survives a crash. On any error (a full disk included) the temp file is removed and
the target keeps its previous content. Record streams that grow while a run is going are
created with `create_exclusive`: never an existence check followed by an open.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

TEMP_SUFFIX = ".tmp"
# What a full disk looks like to a writer: no space, a quota, or a file-size limit
# (RLIMIT_FSIZE, with SIGXFSZ ignored). All three mean the same thing: stop writing.
DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def is_temp(name: str) -> bool:
    """Whether a file's name is one of this module's temp files (`.<target>.<random>.tmp`,
    `.reserve.<random>.tmp`): what a write that was killed leaves behind, never an output."""
    base = name.rsplit("/", 1)[-1]
    return base.startswith(".") and base.endswith(TEMP_SUFFIX)


def is_disk_full(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in DISK_FULL


def fsync_dir(folder: Path) -> None:
    """Make a rename or a new name in `folder` durable (no-op where folders can't be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on a folder; the rename is still atomic
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_file(path: Path | str) -> Iterator[IO[bytes]]:
    """Yield a binary file that becomes `path` only if the block finishes without error."""
    path = Path(path)
    # mkstemp opens with O_CREAT | O_EXCL: the name is new, never a symlink someone planted.
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TEMP_SUFFIX, dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; outputs are ordinary readable files
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and exc.filename is None:
            exc.filename = str(path)  # name the file, not just the errno, in the message
        raise
    fsync_dir(path.parent)


def write_bytes(path: Path | str, data: bytes) -> Path:
    with atomic_file(path) as f:
        f.write(data)
    return Path(path)


def write_text(path: Path | str, text: str) -> Path:
    return write_bytes(path, text.encode("utf-8"))


def write_json(path: Path | str, doc: Any, indent: int | None = 2) -> Path:
    return write_text(path, json.dumps(doc, indent=indent) + "\n")


def write_with(path: Path | str, writer: Callable[[IO[bytes]], None]) -> Path:
    """Atomically write whatever `writer(file)` writes (a parquet writer, a PNG renderer)."""
    with atomic_file(path) as f:
        writer(f)
    return Path(path)


def create_exclusive(path: Path | str) -> IO[bytes]:
    """Open a new file for writing; FileExistsError if the name exists (a symlink included).

    O_EXCL makes the existence check and the creation one step, so two runs never share a
    stream and a symlink planted under the name is refused rather than followed.
    """
    return os.fdopen(_open_exclusive(path), "wb")


def _open_exclusive(path: Path | str) -> int:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(
        os, "O_CLOEXEC", 0)
    fd = os.open(path, flags, 0o644)
    fsync_dir(Path(path).parent)
    return fd



class AppendFile:
    """A record stream's file: what a writer gives it is buffered until `flush()`, which
    writes all of it (looping over short writes) or, on any error, cuts the file back to the
    end of the last flush that succeeded. The file therefore only ever ends after a complete
    flush, never inside a torn one, and a full disk gives back the pages of the torn write."""

    def __init__(self, fd: int) -> None:
        self.fd, self.good, self.closed = fd, 0, False
        self.buf = bytearray()

    def write(self, data) -> int:
        self.buf += data
        return len(data)

    def flush(self) -> None:
        if not self.buf:
            return
        view = memoryview(self.buf)
        try:
            while view:
                view = view[os.write(self.fd, view):]
        except BaseException:
            view.release()
            self.rollback()
            raise
        view.release()
        self.good += len(self.buf)
        self.buf.clear()

    def rollback(self) -> None:
        """Drop what is buffered and cut the file back to its last complete flush."""
        self.cut(self.good)

    def cut(self, size: int) -> None:
        """Drop what is buffered and cut the file back to `size` (the end of an earlier
        complete flush)."""
        self.buf.clear()
        self.good = min(self.good, size)
        with contextlib.suppress(OSError):
            os.ftruncate(self.fd, self.good)
            os.lseek(self.fd, self.good, os.SEEK_SET)

    def tell(self) -> int:
        return self.good + len(self.buf)

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.fd

    def close(self) -> None:
        if self.closed:
            return
        try:
            self.flush()
        finally:
            self.closed = True
            os.close(self.fd)


def create_stream(path: Path | str) -> AppendFile:
    """A new record stream, created exclusively like `create_exclusive`."""
    return AppendFile(_open_exclusive(path))


class Reserve:
    """A little disk space held back for the last words of a run.

    When the disk fills mid-run, the final manifest still has to be written (through a temp
    file: a few KiB). The space is held by a file that has no name (O_TMPFILE, or created
    and unlinked at once), so nothing is left behind whatever happens to the process: the
    kernel frees it when the descriptor closes, a SIGKILL included. `release()` gives it
    back. Best effort: where the space cannot be allocated there is simply no reserve.
    """

    def __init__(self, folder: Path | str, size: int = 256 << 10) -> None:
        self.fd: int | None = None
        try:
            self.fd = _nameless(Path(folder))
            if hasattr(os, "posix_fallocate"):
                os.posix_fallocate(self.fd, 0, size)
            else:  # no way to reserve blocks without writing them
                os.write(self.fd, bytes(size))
        except OSError:
            self.release()

    @property
    def held(self) -> bool:
        return self.fd is not None

    def release(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = None

    def __del__(self) -> None:  # a run that never reached its end gives the space back too
        self.release()


def _nameless(folder: Path) -> int:
    tmpfile = getattr(os, "O_TMPFILE", 0)
    if tmpfile:
        try:
            return os.open(folder, tmpfile | os.O_RDWR | getattr(os, "O_CLOEXEC", 0), 0o600)
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
                raise
    fd, name = tempfile.mkstemp(prefix=".reserve.", suffix=TEMP_SUFFIX, dir=folder)
    os.unlink(name)
    return fd
