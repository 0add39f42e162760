"""Links from the comparison page to each run's report are built from folder names, which
may come from anywhere (an imported run, a folder someone named): each is `./`-relative and
percent-encoded, so a folder named `javascript:…` is a path, never a URL scheme, and `#`
or `?` never cut it short."""

from __future__ import annotations

import html
import re
from pathlib import Path
from urllib.parse import unquote, urljoin

import pytest
from servingbench.resources.report.comparison import run_link
from servingbench.resources.report.rundata import RunData


@pytest.mark.parametrize("folder", ["javascript:alert(1)", "a#b?c=d", "data:text,x", "plain-run",
                                    "sp ace%20"])
def test_a_run_link_is_a_relative_path_whatever_the_folder_is_named(tmp_path, folder):
    run_dir = tmp_path / "runs" / folder
    run_dir.mkdir(parents=True)
    (run_dir / "report.html").write_text("<p>run</p>")
    run = RunData(run_dir, {"run_id": folder}, None, None, None, None)
    page = tmp_path / "runs"
    cell = run_link(run, page).html
    href = html.unescape(re.search(r'href="([^"]*)"', cell)[1])
    assert href.startswith("./")
    assert re.fullmatch(r"[A-Za-z0-9._~/%-]+", href), href  # nothing a browser reads as syntax
    # a browser resolving it against the page's URL lands on the run's own report
    resolved = unquote(urljoin(page.as_uri() + "/", href)[len("file://"):])
    assert Path(resolved) == run_dir / "report.html"
