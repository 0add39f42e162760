"""Image prompts: how many prefill tokens one image costs on Llama 4 (EMULATED accounting).

The rule is Llama 4's image processor and processor in Hugging Face transformers
(`models/llama4/image_processing_llama4_fast.py`, `processing_llama4.py`), which vLLM's
Llama 4 model uses to build its prompt:

1. Canvases: every (h × 336, w × 336) with h · w ≤ 16 tiles (`max_patches`).
2. Best fit (`get_best_fit`, `resize_to_max_canvas` false): the limiting scale of an image
   H × W onto a canvas is min(th / H, tw / W). If some canvas needs no downscaling
   (scale ≥ 1) the smallest such scale wins, else the largest scale below 1; among the
   canvases with that scale the one of least area.
3. Tokens (`_prompt_split_image`, 336 px tiles of 14 px patches, pixel shuffle 0.5:
   (336 / 14)² / 4 = 144 patch tokens per tile): `<|image_start|>`, then, only when the
   canvas has more than one tile, h rows of w tiles, each tile's 144 patches followed by a
   separator (x between tiles, y after a row): h · w · 145; then `<|image|>`, the global
   tile's 144 patches and `<|image_end|>` (147).

So one tile costs 147 tokens and an h × w canvas 147 + 145 · h · w: 336×336 → 147,
512×512 → 2×2 → 727, 1024×768 (W×H) → 3×4 → 1,887, at most 16 tiles → 2,467.
"""

from __future__ import annotations

import base64
import binascii
import struct
import zlib

TILE, PATCH, MAX_TILES = 336, 14, 16
PATCHES_PER_TILE = (TILE // PATCH) ** 2 // 4  # pixel shuffle ratio 0.5 → 4× fewer tokens
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MAX_SIDE = 1 << 15


class ImageError(ValueError):
    """An image part that cannot be read (the server answers 400)."""


def canvases(max_tiles: int = MAX_TILES) -> list[tuple[int, int]]:
    """Every tile grid (rows, columns) with at most `max_tiles` tiles."""
    return [(h, w) for h in range(1, max_tiles + 1) for w in range(1, max_tiles + 1)
            if h * w <= max_tiles]


def best_fit(height: int, width: int, max_tiles: int = MAX_TILES) -> tuple[int, int]:
    """The tile grid (rows, columns) Llama 4's processor picks for an image H × W."""
    scored = [(min(h * TILE / height, w * TILE / width), h, w) for h, w in canvases(max_tiles)]
    up = [s for s, _, _ in scored if s >= 1]
    chosen = min(up) if up else max(s for s, _, _ in scored)
    return min(((h, w) for s, h, w in scored if s == chosen), key=lambda hw: hw[0] * hw[1])


def image_tokens(width: int, height: int) -> int:
    h, w = best_fit(height, width)
    tiles = h * w
    return 3 + PATCHES_PER_TILE + (tiles * (PATCHES_PER_TILE + 1) if tiles > 1 else 0)


def png_size(data: bytes) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk."""
    if len(data) < 24 or data[:8] != PNG_SIGNATURE or data[12:16] != b"IHDR":
        raise ImageError("not a PNG image (only PNG data URLs are read by the emulator)")
    width, height = struct.unpack(">II", data[16:24])
    if not (0 < width <= MAX_SIDE and 0 < height <= MAX_SIDE):
        raise ImageError(f"PNG size {width}x{height} out of range")
    return width, height


def data_url_size(url: object) -> tuple[int, int]:
    """(width, height) of a `data:image/png;base64,...` URL."""
    if not isinstance(url, str) or not url.startswith("data:image/png;base64,"):
        raise ImageError("image_url.url must be a data:image/png;base64 URL (the emulator "
                         "fetches nothing)")
    try:
        head = base64.b64decode(url[22:22 + 44], validate=False)  # 33 bytes: signature + IHDR
    except (binascii.Error, ValueError):
        raise ImageError("image_url.url: invalid base64") from None
    return png_size(head)


def image_ids(url: str, n: int) -> list[int]:
    """`n` placeholder token ids standing for the image: the same image gives the same ids,
    so a prefix cache can serve it, as vLLM's hash of the image content does."""
    return [zlib.crc32(url.encode())] * n


def part_tokens(part: dict) -> list[int]:
    """The prompt tokens of one OpenAI `image_url` content part; ImageError when unreadable."""
    image = part.get("image_url")
    url = image.get("url") if isinstance(image, dict) else image
    width, height = data_url_size(url)
    return image_ids(url, image_tokens(width, height))
