"""The reports render in a real headless Chromium (Debian's `chromium` package): a
non-trivial screenshot with the EMULATED banner on top where it belongs, every inlined image
decoded, and no console error. One browser session loads all three pages."""

from __future__ import annotations

import matplotlib.image as mpimg
import numpy as np
import pytest

from tests.support.browser import CHROMIUM, load_page, load_pages

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="/usr/bin/chromium is absent: install Debian's `chromium` package (.ci/run does)")


def _non_trivial(png_path) -> np.ndarray:
    img = mpimg.imread(png_path)
    assert img.shape[0] >= 1000 and img.shape[1] >= 1000, img.shape
    rgb = img[..., :3]
    packed = (rgb.reshape(-1, 3) * 255).round().astype(np.int64) @ np.array([65536, 256, 1])
    assert len(np.unique(packed)) > 100 and rgb.std() > 0.05
    return img


def test_reports_load_without_console_errors(reports, tmp_path):
    which = ["comparison", "emulated", "measured"]
    loads = load_pages([reports[w] for w in which], tmp_path / "profile")
    for name, page in zip(which, loads, strict=True):
        assert page.errors == [], name
        images = page.facts["images"]
        assert len(images) == (4 if name == "comparison" else 3), name
        assert all(complete and w > 500 and h > 300 for complete, w, h in images), images
        assert page.facts["scripts"] == 0 and page.facts["tables"] >= 5
        if name == "comparison":  # the frontier section rendered: its plots and level table
            # each run id in the headline on one line, never broken inside
            assert page.facts["run_id_lines"] and set(page.facts["run_id_lines"]) == {1}
            frontier = page.facts["sections"]["frontier"].lower()
            assert "cheapest" in frontier and "runner-up" in frontier and "what-if" in frontier
        if name == "measured":
            assert page.facts["banner"] is None and "EMULATED" not in page.facts["title"]
        else:
            assert page.facts["banner"].startswith("EMULATED")
        (tmp_path / f"{name}.png").write_bytes(page.screenshot)
        img = _non_trivial(tmp_path / f"{name}.png")
        if name != "measured":  # the sticky EMULATED banner: the red strip across the top
            top = img[5, img.shape[1] // 2, :3]
            assert top[0] > 0.6 and top[1] < 0.2 and top[2] < 0.2, (name, top)


def test_the_console_check_catches_errors(tmp_path):
    """The check above can fail: a page with a script error, a console.error and a
    missing image is reported with all three."""
    bad = tmp_path / "bad.html"
    bad.write_text('<!DOCTYPE html><html><body><script>console.error("boom")</script>'
                   '<img src="missing.png"><script>undefinedCall()</script></body></html>')
    errors = load_page(bad, tmp_path / "profile").errors
    assert any("boom" in e for e in errors)
    assert any(e.startswith("exception") for e in errors)
    assert any("missing.png" in e for e in errors)
