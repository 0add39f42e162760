"""Reading the HTML reports as a browser would see their structure: tags, ids, text, and the
safety rules every report must keep (known tags only, no handlers, images inlined)."""

from __future__ import annotations

import base64
from html.parser import HTMLParser

ALLOWED_TAGS = {"html", "head", "meta", "title", "style", "body", "main", "div", "h1", "h2",
                "p", "section", "table", "thead", "tbody", "tr", "th", "td", "span", "figure",
                "img", "figcaption", "caption", "code", "a"}


class Page(HTMLParser):
    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)

    @property
    def plain(self) -> str:
        return " ".join(self.text)

    def ids(self) -> set[str]:
        return {a["id"] for _, a in self.tags if "id" in a}


def check_safe(html: str) -> Page:
    page = Page(html)
    for tag, attrs in page.tags:
        assert tag in ALLOWED_TAGS, f"unexpected tag <{tag}>"
        assert not any(name.startswith("on") for name in attrs), (tag, attrs)
        if tag == "a":  # a run's own report, by a relative path: never a scheme or handler
            assert ":" not in attrs["href"] and not attrs["href"].startswith("/"), attrs
        if tag == "img":
            assert attrs["src"].startswith("data:image/png;base64,")
            png = base64.b64decode(attrs["src"].split(",", 1)[1])
            assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 15_000
    assert "http://" not in html and "https://" not in html and "file://" not in html
    return page
