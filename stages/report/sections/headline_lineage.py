"""The lineage of every headline number: its metrics.json path, stage, upstream chain, params and inputs."""
from __future__ import annotations

from ...shared.core.formatting import fmt
from ..headline import Headline, anchor
from ..inputs import Inputs
from ..render import Section


def lineage_rows(heads: list[Headline], lineage: dict) -> list[tuple[str, dict]]:
    """(path, lineage entry) of every headline number, in headline order, without repeats."""
    seen: dict[str, dict] = {}
    for h in heads:
        for f in h.figures:
            if f.path and f.path in lineage and f.path not in seen:
                seen[f.path] = lineage[f.path]
    return list(seen.items())


def _chain_text(e: dict) -> tuple[str, str, str]:
    inputs = "; ".join(f"{p}: {(m or '?')[:8]}" for p, m in e["inputs"].items()) or "–"
    params = ", ".join(sorted(e["params"])) or "–"
    chain = " ← ".join([e["stage"], *e["upstream"]])
    return inputs, params, chain


def lineage_html(rows: list[tuple[str, dict]]) -> str:
    import html

    body = []
    for path, e in rows:
        inputs, params, chain = _chain_text(e)
        body.append(f'<tr id="{anchor(path)}"><td><code>{html.escape(path)}</code></td><td>{fmt(e["value"])}</td>'
                    f"<td>{html.escape(chain)}</td><td>{html.escape(params)}</td><td>{html.escape(inputs)}</td>"
                    f"<td>{html.escape((e.get('git_commit') or '?')[:10])}{' (dirty)' if e.get('git_dirty') else ''}"
                    "</td></tr>")
    return ("<table><thead><tr><th>metrics.json path</th><th>value</th><th>stage ← upstream</th><th>params read</th>"
            f"<th>inputs (md5)</th><th>commit</th></tr></thead><tbody>{''.join(body)}</tbody></table>")


def lineage_markdown(rows: list[tuple[str, dict]]) -> str:
    lines = ["| metrics.json path | value | stage ← upstream | inputs (md5) | commit |", "|---|---|---|---|---|"]
    for path, e in rows:
        inputs, _params, chain = _chain_text(e)
        lines.append(f'| <a id="{anchor(path)}"></a>`{path}` | {fmt(e["value"])} | {chain} | {inputs} | '
                     f"{(e.get('git_commit') or '?')[:10]} |")
    return "\n".join(lines)


def headline_lineage_section(inp: Inputs) -> Section:
    rows = lineage_rows(inp.heads, inp.lineage)
    return Section("Lineage of the headline numbers", raw_html=lineage_html(rows), raw_md=lineage_markdown(rows),
                   paragraphs=[
                       "Each headline number's path in reports/metrics.json, the stage that wrote it and its upstream "
                       "chain as dvc.lock records them, the params it read and the md5 of its inputs. "
                       "`leakaudit lineage reports/metrics.json:<path>` prints the whole chain back to the raw files "
                       "(and refuses when the workspace no longer matches dvc.lock)."])
