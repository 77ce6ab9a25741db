"""One report, two renderings: the report is a list of blocks (headings, paragraphs, tables, images)
rendered to self-contained HTML and to Markdown from the same blocks, so the two never drift apart.

A table cell is a ``Cell``: its text, an HTML class (``flag`` for a flagged cell, ``inert`` for a
difference that never acted), a note shown beside the text (a flag's reason, an inert note) and a
Markdown marker put before it (HTML shows the class instead).
"""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass, field

CSS = (
    "body{font-family:sans-serif;max-width:1200px;margin:2em auto;padding:0 1em}"
    "table{border-collapse:collapse;margin:1em 0;font-size:13px}"
    "td,th{border:1px solid #ccc;padding:3px 8px;vertical-align:top}th{background:#f3f3f3}"
    "tr.diff td{background:#fff3c4}td.flag{background:#f8c9c4 !important}.flag{color:#b00}"
    "td.inert{background:#e4ecf7 !important}.note{display:block;font-size:11px;color:#555}"
    "p.caption{color:#444;font-size:13px}img{max-width:100%}tr.verdict td{font-weight:bold}"
)


@dataclass
class Cell:
    text: str
    cls: str = ""
    note: str = ""
    mark: str = ""


@dataclass
class Heading:
    text: str
    level: int = 2


@dataclass
class Para:
    text: str
    cls: str = ""


@dataclass
class Table:
    header: list[str]
    rows: list[list[Cell | str]]
    row_cls: list[str] = field(default_factory=list)


@dataclass
class Image:
    name: str
    title: str
    png: bytes


Block = Heading | Para | Table | Image


def _cell(c: Cell | str) -> Cell:
    return c if isinstance(c, Cell) else Cell(str(c))


def to_html(title: str, blocks: list[Block]) -> str:
    e = html.escape
    h = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>{e(title)}</title>",
        f"<style>{CSS}</style></head><body>",
        f"<h1>{e(title)}</h1>",
    ]
    for b in blocks:
        if isinstance(b, Heading):
            h.append(f"<h{b.level}>{e(b.text)}</h{b.level}>")
        elif isinstance(b, Para):
            cls = f" class='{b.cls}'" if b.cls else ""
            h.append(f"<p{cls}>{e(b.text)}</p>")
        elif isinstance(b, Image):
            b64 = base64.b64encode(b.png).decode()
            h.append(f"<img alt='{e(b.title)}' src='data:image/png;base64,{b64}'>")
        else:
            h.append("<table><tr>" + "".join(f"<th>{e(x)}</th>" for x in b.header) + "</tr>")
            for i, row in enumerate(b.rows):
                rcls = b.row_cls[i] if i < len(b.row_cls) and b.row_cls[i] else ""
                tds = []
                for c in map(_cell, row):
                    cls = f" class='{c.cls}'" if c.cls else ""
                    note = f"<span class='note'>{e(c.note)}</span>" if c.note else ""
                    tds.append(f"<td{cls}>{e(c.text)}{note}</td>")
                h.append((f"<tr class='{rcls}'>" if rcls else "<tr>") + "".join(tds) + "</tr>")
            h.append("</table>")
    h.append("</body></html>")
    return "\n".join(h)


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(title: str, blocks: list[Block]) -> str:
    md = [f"# {title}", ""]
    for b in blocks:
        if isinstance(b, Heading):
            md += ["#" * b.level + " " + b.text, ""]
        elif isinstance(b, Para):
            md += [b.text, ""]
        elif isinstance(b, Image):
            md += [f"![{b.title}]({b.name})", ""]
        else:
            md.append("| " + " | ".join(_md(x) for x in b.header) + " |")
            md.append("|" + "---|" * len(b.header))
            for row in b.rows:
                cells = []
                for c in map(_cell, row):
                    text = f"{c.mark} {c.text}" if c.mark else c.text
                    cells.append(_md(f"{text} — {c.note}" if c.note else text))
                md.append("| " + " | ".join(cells) + " |")
            md.append("")
    return "\n".join(md) + "\n"
