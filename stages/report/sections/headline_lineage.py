"""The lineage of every headline number: its metrics.json path, stage, upstream chain, params and inputs."""
from __future__ import annotations

from ..headline import lineage_html, lineage_markdown, lineage_rows
from ..inputs import Inputs
from ..render import Section


def headline_lineage_section(inp: Inputs) -> Section:
    rows = lineage_rows(inp.heads, inp.lineage)
    return Section("Lineage of the headline numbers", raw_html=lineage_html(rows), raw_md=lineage_markdown(rows),
                   paragraphs=[
                       "Each headline number's path in reports/metrics.json, the stage that wrote it and its upstream "
                       "chain as dvc.lock records them, the params it read and the md5 of its inputs. "
                       "`leakaudit lineage reports/metrics.json:<path>` prints the whole chain back to the raw files "
                       "(and refuses when the workspace no longer matches dvc.lock)."])
