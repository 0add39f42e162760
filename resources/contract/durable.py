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
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

TEMP_SUFFIX = ".tmp"


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
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
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
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(
        os, "O_CLOEXEC", 0)
    fd = os.open(path, flags, 0o644)
    fsync_dir(Path(path).parent)
    return os.fdopen(fd, "wb")

