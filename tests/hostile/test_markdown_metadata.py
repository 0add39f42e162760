"""Tables shown as Dagster markdown metadata carry names from files (an imported peer's
result names, step names, error texts). Rendered by a CommonMark renderer with tables, as
the Dagster UI renders markdown, no cell becomes an image (a beacon fired when someone
opens the run), a link, raw HTML, or a split row."""

from __future__ import annotations

import pytest
from markdown_it import MarkdownIt
from servingbench.resources.analysis.summary import table

HOSTILE = [
    "![x](http://127.0.0.1:9/beacon.png)",
    "[click](javascript:alert(1))",
    "<img src=http://127.0.0.1:9/b>",
    "a | b | c",
    "line\nbreak ![y](http://127.0.0.1:9/y)",
    "`code` *em* _u_ # h \\ [ref]: http://127.0.0.1:9/r",
    "<http://127.0.0.1:9/auto>",
]


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_name_renders_as_its_own_text_in_one_cell(name):
    md = table([{"name": name, "n": 1}], [("name", "name", ""), ("n", "n", "")], markdown=True)
    out = MarkdownIt("commonmark").enable("table").render(md)
    assert "<img" not in out and "<a " not in out and "<code>" not in out, out
    assert out.count("<td>") == 2, out  # one row, two cells: nothing split it


def test_plain_names_are_untouched():
    md = table([{"name": "c=4 p5.48xlarge-scout_bf16", "n": 1}],
               [("name", "name", ""), ("n", "n", "")], markdown=True)
    assert "c=4 p5.48xlarge-scout_bf16" in MarkdownIt("commonmark").enable("table").render(md)
