"""Exposure of the secret-sharer (formatted) canaries, per run and format, with its plot."""
from __future__ import annotations

from ...shared.core.formatting import Table
from ..inputs import Inputs
from ..plots import exposure_plot, exposure_points
from ..render import Section


def exposure_section(inp: Inputs) -> Section | None:
    ex = Table(["run", "format", "|R|", "inserted", "exposure rate", "mean exposure (inserted)",
                "mean exposure (not inserted)", "max possible"])
    images = []
    for run, r in inp.runs.items():
        if not r.exposure:
            continue
        for fmt_name, m in r.exposure.items():
            ex.rows.append([run, fmt_name, m.candidates, m.inserted, m.exposure_rate,
                            m.mean_exposure_inserted, m.mean_exposure_not_inserted, m.max_exposure])
        png = inp.plots_dir / f"exposure_{run}.png"
        exposure_plot(r.exposure, f"run {run}: exposure vs repetitions", png)
        inp.plot_data("exposure", run, exposure_points(r.exposure))
        images.append((f"Run {run}: mean exposure of inserted secret-sharer canaries by number of repetitions", png))
    note = ("Formatted canaries (name, city, email, 5-digit phone, 6 letters, one or three random words; privlm-bench "
            "Table 4), a share of each format's candidates inserted with increasing repetitions. Exposure = log2|R| − "
            "log2 rank of the inserted fill among all candidates by log-perplexity; exposure rate = share of "
            "inserted canaries less perplexing than every non-inserted candidate.")
    return Section("Exposure of secret-sharer canaries", tables=[ex], images=images, paragraphs=[note]) if ex.rows \
        else None
