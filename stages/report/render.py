"""report.md and a self-contained index.html (plots inlined) built from the same table model.

Every number shown comes from reports/metrics.json (the audit stage's DVC metrics) or a run
record, and carries a lineage id: its JSON path in metrics.json, the stage that wrote it, the md5
of that stage's inputs per dvc.lock, the params it read, and the git commit.
"""
from __future__ import annotations

import base64
import html
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Table:
    headers: list[str]
    rows: list[list[Any]] = field(default_factory=list)


@dataclass
class Section:
    title: str
    paragraphs: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    images: list[tuple[str, Path]] = field(default_factory=list)  # (caption, path)
    verbatim: list[str] = field(default_factory=list)  # markdown shown as-is (tables become HTML tables)


def fmt(x: Any, nd: int = 3) -> str:
    if x is None:
        return "–"
    if isinstance(x, str):
        return x
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        if math.isnan(x):
            return "nan"
        if math.isinf(x):
            return "∞"
        return f"{x:.{nd}f}"
    return str(x)


def flatten(obj: Any, prefix: str = "", numbers_only: bool = False) -> dict:
    """Nested dicts -> {"a.b.c": leaf}; with numbers_only, only int/float leaves are kept."""
    out: dict = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k), numbers_only))
    elif not numbers_only or (isinstance(obj, (int, float)) and not isinstance(obj, bool)):
        out[prefix] = obj
    return out


def ci(v: float, lohi) -> str:
    return f"{fmt(v)} [{fmt(lohi[0])}, {fmt(lohi[1])}]"


def md_table(t: Table) -> str:
    esc = lambda s: fmt(s).replace("|", "\\|")  # noqa: E731
    lines = ["| " + " | ".join(t.headers) + " |", "|" + "---|" * len(t.headers)]
    lines += ["| " + " | ".join(esc(c) for c in r) + " |" for r in t.rows]
    return "\n".join(lines)


def to_markdown(title: str, sections: list[Section], out_dir: Path) -> str:
    parts = [f"# {title}", ""]
    for s in sections:
        parts += [f"## {s.title}", ""]
        parts += [p + "\n" for p in s.paragraphs]
        for t in s.tables:
            parts += [md_table(t), ""]
        parts += [v + "\n" for v in s.verbatim]
        for cap, path in s.images:
            parts += [f"![{cap}]({path.relative_to(out_dir).as_posix()})", f"*{cap}*", ""]
    return "\n".join(parts)


_CSS = """body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:0.6em 0 1.2em;font-size:0.86em}th,td{border:1px solid #ccc;padding:3px 7px;text-align:left}
th{background:#f2f2f2}td{font-variant-numeric:tabular-nums}code{background:#f5f5f5;padding:0 3px}img{max-width:100%}
figcaption{font-size:0.85em;color:#555;margin-bottom:1.5em}h2{border-bottom:1px solid #ddd;padding-bottom:0.2em;margin-top:1.6em}"""


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


def to_html(title: str, sections: list[Section]) -> str:
    body = [f"<h1>{html.escape(title)}</h1>"]
    for s in sections:
        body.append(f"<h2>{html.escape(s.title)}</h2>")
        body += [f"<p>{_inline(p)}</p>" for p in s.paragraphs]
        for t in s.tables:
            head = "".join(f"<th>{html.escape(h)}</th>" for h in t.headers)
            rows = "".join("<tr>" + "".join(f"<td>{html.escape(fmt(c))}</td>" for c in r) + "</tr>" for r in t.rows)
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
        body += [_markdown_to_html(v) for v in s.verbatim]
        for cap, path in s.images:
            data = base64.b64encode(path.read_bytes()).decode()
            body.append(f'<figure><img alt="{html.escape(cap)}" src="data:image/png;base64,{data}"/>'
                        f"<figcaption>{html.escape(cap)}</figcaption></figure>")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{_CSS}</style></head><body>{''.join(body)}</body></html>\n")
