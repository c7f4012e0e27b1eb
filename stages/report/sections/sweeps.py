"""The sweeps' tables (reports/sweeps/*.md, written by flows/sweep.py), shown as they are."""
from __future__ import annotations

from ..inputs import Inputs
from ..render import Section


def sweeps_section(inp: Inputs) -> Section | None:
    folder = inp.out_dir / "sweeps"
    sweeps = sorted(f for f in folder.glob("*.md") if f.name != "README.md") if folder.is_dir() else []
    if not sweeps:
        return None
    return Section("Sweeps (DVC experiments)", paragraphs=[
        "Written by `python -m flows.sweep`; each row names its DVC experiment and commit "
        "(`dvc exp show --rev <baseline>` has its full params and lineage; experiments live in this repository's "
        "refs/exps, `dvc exp push <remote>` shares them, and reports/sweeps/<name>.json keeps every metric of every "
        "experiment commit)."], verbatim=[f.read_text() for f in sweeps])
