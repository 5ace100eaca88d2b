"""A self-contained HTML page: text, tables and PNGs embedded as ``data:`` URIs.

Responsibility: assemble report pages (a run's report.html, a comparison's compare.html)
from escaped text, tables and PNG bytes. The page links nothing: no scripts, no style
sheets, no fonts, no images outside the file, so it opens offline and in any browser.

Invariant: every piece of text is HTML-escaped; the only URIs in a page are the ``data:``
URIs of its images (a test scans pages for any other).
"""

from __future__ import annotations

import base64
import html

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 980px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
table { border-collapse: collapse; font-size: 0.9em; }
td, th { border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: right; }
td:first-child, th:first-child { text-align: left; }
.warn { background: #fff3cd; border: 1px solid #e0c36c; padding: 0.6em 1em; }
.read { color: #444; font-size: 0.92em; max-width: 720px; }
img { max-width: 100%; border: 1px solid #eee; }
code { font-size: 0.95em; }
"""


def esc(x) -> str:
    return html.escape(str(x), quote=True)


def table(header: list[str], rows: list[list]) -> str:
    """An HTML table of escaped cells."""
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def image(png: bytes, alt: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return f'<img alt="{esc(alt)}" src="data:image/png;base64,{data}">'


def warnings_block(warnings: list[str]) -> str:
    if not warnings:
        return ""
    items = "".join(f"<li>{esc(w)}</li>" for w in warnings)
    return f'<div class="warn"><b>Warnings</b> (this run looks pathological)<ul>{items}</ul></div>'


def accuracy_block(acc: dict | None) -> str:
    """The run's ``accuracy`` section: how far to trust its step times (older run folders
    have none: said so)."""
    if not acc:
        return "<h2>Accuracy</h2><p>not recorded (a run made before kvsim stated it)</p>"

    def pct(x, sign: str = ""):
        return "n/a" if x is None else f"{x:{sign}.1%}"

    rows = [["basis", acc["basis"]], ["source", acc["source"] or "-"],
            ["median relative error", pct(acc["median_rel_error"])],
            ["worst relative error", pct(acc["worst_rel_error"], "+")],
            ["outside the fitted domain", "; ".join(acc["outside_domain"]) or "no"],
            ["not measured (share of the step time)", ", ".join(
                k if v is None else f"{k} ({v:.1%})"
                for k, v in (acc.get("not_measured") or {}).items()) or "-"],
            ["detail", acc["detail"]]]  # fmt: skip
    return "<h2>Accuracy</h2>" + table(["", ""], rows)


def page(title: str, parts: list[str]) -> str:
    """The whole page; ``parts`` are HTML fragments made with the helpers above."""
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{esc(title)}</title><style>{STYLE}</style></head><body>\n"
        + "\n".join(parts)
        + "\n</body></html>\n"
    )
