"""HTML building blocks of the reports: escaping, number formatting, tables, inlined
images and the page shell. Every piece of text from a run goes through `esc`; nothing
from a run is ever written into the page unescaped.

The page is self-contained (images inlined as base64 data: URIs) and its
Content-Security-Policy forbids anything else to load, so a browser opening it makes no
request and runs no script.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Iterable, Sequence
from html import escape
from pathlib import Path

from servingbench.resources.contract import durable

NULL = "\u2014"  # an em dash: a null stays visibly unknown, never 0

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"

CSS = """
:root { color-scheme: light; }
body { background: #ffffff; color: #1a1a1a; font: 14px/1.45 system-ui, -apple-system,
       "Segoe UI", Roboto, "DejaVu Sans", sans-serif; margin: 0; }
main { max-width: 1320px; margin: 0 auto; padding: 12px 24px 48px; }
h1 { font-size: 22px; margin: 16px 0 4px; }
h2 { font-size: 17px; margin: 28px 0 8px; border-bottom: 1px solid #d0d0d0; padding-bottom: 3px; }
.sub { color: #555555; margin: 0 0 8px; }
.banner { position: sticky; top: 0; z-index: 5; background: #b00020; color: #ffffff;
          font-weight: 700; padding: 10px 24px; font-size: 16px; letter-spacing: .02em; }
.badge { display: inline-block; padding: 0 6px; border-radius: 3px; font-size: 12px;
         font-weight: 700; }
.badge.emulated { background: #b00020; color: #ffffff; }
.badge.ok { background: #1e7b34; color: #ffffff; }
.badge.bad { background: #b00020; color: #ffffff; }
.badge.unknown { background: #6c6c6c; color: #ffffff; }
.scroll { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; margin: 6px 0 12px; font-size: 13px; }
th, td { border: 1px solid #d4d4d4; padding: 3px 8px; text-align: left; vertical-align: top; }
td.long { max-width: 460px; overflow-wrap: anywhere; }
th { background: #f0f2f5; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.null { color: #8a8a8a; text-align: center; }
tr.invalid td, tr.bad td { background: #fdecee; }
tr.emulated td:first-child { border-left: 4px solid #b00020; }
.note { color: #444444; font-size: 13px; }
figure { margin: 10px 0 18px; }
figure img { max-width: 100%; height: auto; border: 1px solid #d4d4d4; display: block; }
figcaption { color: #555555; font-size: 12px; margin-top: 3px; }
.barcell { width: 220px; }
.bar { background: #4c78a8; height: 10px; }
.bar.sub { background: #9ecae9; }
code { font-size: 12px; background: #f4f4f4; padding: 0 3px; word-break: break-all; }
code.run-id { white-space: nowrap; word-break: normal; }
"""


def esc(value) -> str:
    """Text for HTML: `&<>"'` escaped; None and NaN shown as an em dash."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return NULL
    return escape(str(value), quote=True)


def is_null(value) -> bool:
    if value is None:
        return True
    try:
        return bool(value != value)  # NaN, pd.NA-safe enough for scalars
    except (TypeError, ValueError):
        return False


def num(value, digits: int = 4) -> str:
    """A number with `digits` significant digits (thousands separated); null -> em dash."""
    if is_null(value):
        return NULL
    v = float(value)
    if v != 0 and abs(v) >= 10 ** digits:
        return f"{v:,.0f}"
    return f"{v:.{digits}g}"


def usd(value) -> str:
    return NULL if is_null(value) else f"${float(value):,.2f}"


def pct(value, digits: int = 1) -> str:
    if is_null(value):
        return NULL
    shown = round(float(value) * 100, digits)
    return f"{shown + 0.0:.{digits}f} %"  # + 0.0: never "-0.0 %"


class Cell:
    """A pre-rendered cell: `html` is trusted markup built by this module from escaped
    parts; `kind` picks the CSS class ('num', 'text', 'null')."""

    def __init__(self, html: str, kind: str = "text"):
        self.html, self.kind = html, kind


def cell(value, kind: str = "text") -> Cell:
    """An escaped text cell, or a number cell when `kind == 'num'` (value already formatted)."""
    if is_null(value) or value == NULL:
        return Cell(NULL, "null")
    if kind == "text" and any(len(word) > 40 for word in str(value).split()):
        kind = "text long"  # a digest or id: may break anywhere, other text only at spaces
    return Cell(esc(value), kind)


def badge(text: str, kind: str) -> Cell:
    return Cell(f'<span class="badge {esc(kind)}">{esc(text)}</span>')


def passed_badge(passed) -> Cell:
    if passed is None:
        return badge("not checked", "unknown")
    return badge("pass", "ok") if passed else badge("FAIL", "bad")


def table(headers: Sequence[str], rows: Iterable[Sequence[Cell | str | None]],
          row_classes: Iterable[str] | None = None, caption: str | None = None) -> str:
    """A table; plain values in rows are escaped, Cell objects used as they are."""
    out = ['<div class="scroll"><table>']
    if caption:
        out.append(f"<caption class='note'>{esc(caption)}</caption>")
    out.append("<thead><tr>" + "".join(f"<th>{esc(h)}</th>" for h in headers) + "</tr></thead>")
    out.append("<tbody>")
    classes = list(row_classes) if row_classes is not None else None
    for i, row in enumerate(rows):
        cls = f' class="{esc(classes[i])}"' if classes and classes[i] else ""
        tds = []
        for value in row:
            c = value if isinstance(value, Cell) else cell(value)
            tds.append(f'<td class="{c.kind}">{c.html}</td>')
        out.append(f"<tr{cls}>" + "".join(tds) + "</tr>")
    out.append("</tbody></table></div>")
    return "\n".join(out)


def kv_table(pairs: Iterable[tuple[str, object]]) -> str:
    return table(("fact", "value"), ([k, v if isinstance(v, Cell) else cell(v)]
                                     for k, v in pairs))


def image(path: Path, alt: str, caption: str | None = None) -> str:
    data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
    cap = f"<figcaption>{esc(caption)}</figcaption>" if caption else ""
    return f'<figure><img alt="{esc(alt)}" src="data:image/png;base64,{data}">{cap}</figure>'


def section(title: str, body: str, anchor: str | None = None) -> str:
    ident = f' id="{esc(anchor)}"' if anchor else ""
    return f"<section{ident}><h2>{esc(title)}</h2>\n{body}\n</section>"


def para(text: str, cls: str = "note") -> str:
    return f'<p class="{esc(cls)}">{esc(text)}</p>'


def emulated_banner(text: str) -> str:
    return f'<div class="banner emulated" role="alert" id="emulated-banner">{esc(text)}</div>'


def page(title: str, body: str, banner: str = "") -> str:
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{esc(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n"
        f"{banner}\n<main>\n{body}\n</main>\n</body>\n</html>\n"
    )


def write_html(text: str, path: Path) -> Path:
    """Write atomically: a reader never sees half a report."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return durable.write_text(path, text)
