"""Images for multimodal prompts, made here (nothing is downloaded): OpenAI `image_url`
content parts holding a PNG data URL of a given size.

Each image is one flat colour, drawn from the run's seeded generator, so two requests never
send the same pixels (a server's image cache, like its prefix cache, would otherwise serve
the repeats). The PNG is palette-based: its compressed pixel data (every pixel index 0) is
made once per size, and only the palette entry, the colour, changes per image; building one
costs microseconds, however large the image.
"""

from __future__ import annotations

import base64
import random
import re
import struct
import zlib
from functools import cache
from pathlib import Path

from servingbench.resources.loadgen.errors import LoadConfigError

MAX_SIDE = 8192  # larger than any tiling a served model applies (Llama 4: 16 tiles of 336)
_SIZE = re.compile(r"(\d{1,5})x(\d{1,5})\Z")
MIME = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".webp": "image/webp"}
MAX_FILE_BYTES = 20 << 20
MAX_TOTAL_BYTES = 256 << 20  # every distinct image file of a dataset together


def parse_size(text: str, where: str = "--image-size") -> tuple[int, int]:
    """`1024x768` → (1024, 768), width first."""
    m = _SIZE.match(str(text).strip())
    if not m or not (0 < int(m[1]) <= MAX_SIDE and 0 < int(m[2]) <= MAX_SIDE):
        raise LoadConfigError(f"{where}: expected WIDTHxHEIGHT with sides 1..{MAX_SIDE}, "
                              f"got {text!r}")
    return int(m[1]), int(m[2])


def looks_like_size(text: str) -> bool:
    return bool(_SIZE.match(text.strip()))


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


@cache
def _frame(width: int, height: int) -> tuple[bytes, bytes]:
    """The parts of a palette PNG of this size around its PLTE chunk."""
    head = b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 3,
                                                              0, 0, 0))
    rows = bytes(width + 1) * height  # filter byte 0 + palette index 0 per pixel
    tail = _chunk(b"IDAT", zlib.compress(rows, 9)) + _chunk(b"IEND", b"")
    return head, tail


def png(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    head, tail = _frame(width, height)
    return head + _chunk(b"PLTE", bytes(rgb)) + tail


def data_url(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


class FileImages:
    """A dataset's image files as data URLs: each file only inside the dataset's folder
    (`root`; a `..`, an absolute path or a link leading out is refused), read and encoded
    once however many rows name it (rows share the one string), and all distinct files
    together at most MAX_TOTAL_BYTES."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.urls: dict[Path, str] = {}
        self.total = 0

    def url(self, name: str, where: str) -> str:
        path = (self.root / name).resolve()
        if not path.is_relative_to(self.root):
            raise LoadConfigError(f"{where}: {name!r} is outside the dataset's folder "
                                  f"{self.root} (image files are named relative to it)")
        if path not in self.urls:
            data = self._read(path, where)
            if self.total + len(data) > MAX_TOTAL_BYTES:
                raise LoadConfigError(f"{where}: {path}: the dataset's image files come to more "
                                      f"than {MAX_TOTAL_BYTES >> 20} MiB in total")
            self.total += len(data)
            self.urls[path] = data_url(data, MIME[path.suffix.lower()])
        return self.urls[path]

    @staticmethod
    def _read(path: Path, where: str) -> bytes:
        if path.suffix.lower() not in MIME:
            raise LoadConfigError(f"{where}: {path} is not a .png, .jpg or .webp file")
        try:
            if path.stat().st_size > MAX_FILE_BYTES:
                raise LoadConfigError(f"{where}: {path} is larger than {MAX_FILE_BYTES >> 20} MiB")
            return path.read_bytes()
        except OSError as exc:
            raise LoadConfigError(f"{where}: cannot read {path}: {exc.strerror}") from None


class Images:
    """Image parts for prompts, unique per image, from the run's seed."""

    def __init__(self, seed: int | str) -> None:
        self.rng = random.Random(f"{seed}:images")

    def part(self, width: int, height: int) -> dict:
        rgb = (self.rng.randrange(256), self.rng.randrange(256), self.rng.randrange(256))
        return {"type": "image_url", "image_url": {"url": data_url(png(width, height, rgb))}}

    def parts(self, sizes: list[tuple[int, int] | str]) -> list[dict]:
        """One part per entry: a (width, height) to generate, or a data URL already made."""
        return [{"type": "image_url", "image_url": {"url": s}} if isinstance(s, str)
                else self.part(*s) for s in sizes]


def message_content(text: str, parts: list[dict]) -> list[dict]:
    """OpenAI chat content: the text, then the images."""
    return [{"type": "text", "text": text}, *parts]
