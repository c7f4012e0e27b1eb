"""The headline block: what each run leaked, and how sure we are (stages/report/headline.py builds it)."""
from __future__ import annotations

from ..headline import headline_html, headline_markdown
from ..inputs import Inputs
from ..render import Section


def headline_section(inp: Inputs) -> Section:
    heads = inp.heads
    return Section("Headline: what each run leaked, and how sure we are", in_toc=False,
                   raw_html=headline_html(heads), raw_md=headline_markdown(heads))
