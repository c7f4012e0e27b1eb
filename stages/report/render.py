"""report.md and a self-contained index.html (plots inlined) built from the same table model.

Every number shown comes from reports/metrics.json (the audit stage's DVC metrics) or a run
record, and carries a lineage id: its JSON path in metrics.json, the stage that wrote it, the md5
of that stage's inputs per dvc.lock, the params it read, and the git commit.
"""
from __future__ import annotations

import base64
import html
from dataclasses import dataclass, field
from pathlib import Path

from ..shared.core.formatting import Table, fmt, md_table


@dataclass
class Section:
    title: str
    paragraphs: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    images: list[tuple[str, Path]] = field(default_factory=list)  # (caption, path)
    verbatim: list[str] = field(default_factory=list)  # markdown shown as-is (tables become HTML tables)
    raw_html: str = ""  # pre-rendered block (headline cards, lineage table), after the paragraphs
    raw_md: str = ""  # its markdown twin
    in_toc: bool = True

    @property
    def id(self) -> str:
        return slug(self.title)


#: tables with more rows than this are collapsed (<details>) in the HTML report
COLLAPSE_ROWS = 8


def slug(title: str) -> str:
    import re

    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-") or "section"


def _toc_before(i: int, s: Section) -> bool:
    """The contents line goes after a leading headline block (a section kept out of the contents), else first."""
    return i == 1 or (i == 0 and s.in_toc)


def to_markdown(title: str, sections: list[Section], out_dir: Path) -> str:
    parts = [f"# {title}", ""]
    for i, s in enumerate(sections):
        if _toc_before(i, s):
            parts += ["**Contents:** " + " · ".join(f"[{x.title}](#{x.id})" for x in sections if x.in_toc), ""]
        parts += [f"## {s.title}", ""]
        parts += [p + "\n" for p in s.paragraphs]
        if s.raw_md:
            parts += [s.raw_md, ""]
        for t in s.tables:
            parts += [md_table(t), ""]
        parts += [v + "\n" for v in s.verbatim]
        for cap, path in s.images:
            parts += [f"![{cap}]({path.relative_to(out_dir).as_posix()})", f"*{cap}*", ""]
    return "\n".join(parts)


_CSS = """body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1200px;\
margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:0.6em 0 1.2em;font-size:0.86em}\
th,td{border:1px solid #ccc;padding:3px 7px;text-align:left}
th{background:#f2f2f2}td{font-variant-numeric:tabular-nums}code{background:#f5f5f5;padding:0 3px}img{max-width:100%}
figcaption{font-size:0.85em;color:#555;margin-bottom:1.5em}\
h2{border-bottom:1px solid #ddd;padding-bottom:0.2em;margin-top:1.6em}
h1{margin:0.2em 0 0.4em;font-size:1.6em}.cards{display:flex;gap:12px;align-items:stretch}
.card{flex:1 1 0;border:1px solid #bbb;border-radius:6px;padding:6px 10px;background:#fafcff;min-width:0}
.card h3{margin:0.1em 0}.card .trained{font-size:0.78em;color:#444;margin:0.2em 0}\
.card table{font-size:0.8em;margin:0.3em 0;width:100%}
.card th{width:42%;background:#eef3fa}.card .note{font-size:0.85em;color:#666}\
.card .reading{font-size:0.82em;margin:0.3em 0;font-weight:600}
nav.toc{font-size:0.85em;margin:0.8em 0}nav.toc a{margin-right:0.9em}\
details>summary{cursor:pointer;color:#245;font-size:0.9em}
:target{background:#fff3b0}"""


def _inline(text: str) -> str:
    """Escape, then render `code` spans and **bold** (the only markdown the paragraphs use)."""
    import re

    out = html.escape(text)
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    return re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", out)


def _markdown_to_html(text: str) -> str:
    """Markdown written by our own tools (sweep files): '#' headings, pipe tables, paragraphs."""
    out, table, para = [], [], []

    def flush():
        if para:
            out.append(f"<p>{_inline(' '.join(para))}</p>")
            para.clear()
        if table:
            cells = [[c.strip() for c in ln.strip().strip("|").split("|")] for ln in table
                     if not set(ln.replace("|", "").strip()) <= set("-: ")]
            head = "".join(f"<th>{_inline(c)}</th>" for c in cells[0])
            rows = "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in r) + "</tr>" for r in cells[1:])
            out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
            table.clear()

    for line in text.splitlines():
        if line.lstrip().startswith("|"):
            if para:
                flush()
            table.append(line)
            continue
        if table:
            flush()
        if line.startswith("#"):
            flush()
            out.append(f"<h3>{_inline(line.lstrip('#').strip())}</h3>")
        elif line.strip():
            para.append(line.strip())
        else:
            flush()
    flush()
    return "".join(out)


def _html_table(t: Table) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in t.headers)
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(fmt(c))}</td>" for c in r) + "</tr>" for r in t.rows)
    table = f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"
    if len(t.rows) <= COLLAPSE_ROWS:
        return table
    return (f"<details><summary>{html.escape(t.headers[0])}: {len(t.rows)} rows (click to expand)</summary>"
            f"{table}</details>")


def to_html(title: str, sections: list[Section]) -> str:
    """One offline file: the title, the first section (the headline block) on the first screen, then a table of
    contents and the detailed sections; long tables collapsed."""
    body = [f"<h1>{html.escape(title)}</h1>"]
    toc = "".join(f'<a href="#{s.id}">{html.escape(s.title)}</a>' for s in sections if s.in_toc)
    for i, s in enumerate(sections):
        if _toc_before(i, s):
            body.append(f'<nav class="toc"><b>Contents:</b> {toc}</nav>')
        body.append(f'<h2 id="{s.id}">{html.escape(s.title)}</h2>')
        body += [f"<p>{_inline(p)}</p>" for p in s.paragraphs]
        body.append(s.raw_html)
        body += [_html_table(t) for t in s.tables]
        body += [_markdown_to_html(v) for v in s.verbatim]
        for cap, path in s.images:
            data = base64.b64encode(path.read_bytes()).decode()
            body.append(f'<figure><img alt="{html.escape(cap)}" src="data:image/png;base64,{data}"/>'
                        f"<figcaption>{html.escape(cap)}</figcaption></figure>")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{_CSS}</style></head><body>{''.join(body)}</body></html>\n")
