"""What every report section reads: the audit's metrics and ROC curves, where the stages wrote their outputs,
dvc.lock and the git state, and the number lineage; plus the labels several sections share."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from ..audit.schema import Metrics, RunMetrics, bound_keys, fpr_keys
from ..shared.bounds.keys import BoundKeys
from ..shared.core.artifacts import Locations
from ..shared.core.io import write_json
from .headline import headlines


@dataclass
class Inputs:
    metrics: Metrics
    roc: dict  # (run, attack, group) -> (fpr, tpr)
    where: Locations
    lock: dict
    git: dict
    verified: bool  # dvc.lock's md5 of the audit's outputs matches the files
    plots_dir: Path
    out_dir: Path
    lineage: dict = field(default_factory=dict)  # metrics.json path -> lineage entry (number_lineage)
    bases: dict = field(default_factory=dict)  # run -> its run record's base_model (source.json)
    variance_dir: Path | None = None  # the variance stage's analysis (analysis.json, plots/)
    study_dir: Path | None = None  # the audit design study (reports/audit_study/, flows/audit_study.py)
    selfcheck: Path | None = None  # the DP engine self-check (reports/selfcheck.json, leakaudit selfcheck)
    threats: dict = field(default_factory=dict)  # attack -> the threat model it declares (its attack records)
    auditor: dict = field(default_factory=dict)  # run -> its AuditorRecord (finetune's auditor.json, auditor-only)
    selfcheck_mutants: Path | None = None  # the self-check's mutant flag rates (benchmarks/selfcheck_mutants.py)
    user_level_plan: Path | None = None  # the user-level comparison's plan (flows/user_level_plan.py)
    user_level: Path | None = None  # the user-level comparison's table (flows/user_level.py)
    user_inference: Path | None = None  # user inference with power (flows/user_inference.py)
    positive_control: Path | None = None  # the instruments' positive control (flows/positive_control.py)
    positive_control_power: Path | None = None  # its power follow-up (flows/positive_control.py --section ...)

    @property
    def runs(self) -> dict[str, RunMetrics]:
        return self.metrics.runs

    @property
    def bounds(self) -> list[BoundKeys]:
        """The keys of each of audit.primary.confidences' bounds; the first is the one compared and plotted."""
        return bound_keys(self.metrics)

    @property
    def fprs(self) -> list[str]:
        return fpr_keys(self.metrics)

    @cached_property
    def heads(self) -> list:
        """The headline block's content, per run (shown at the top, in its lineage table and in headline.md/json)."""
        return headlines(self.runs, self.bases, self.bounds, self.headline_fpr, self.metrics.pooled,
                         self.threats)

    def plot_data(self, kind: str, name: str, points: list[dict]) -> None:
        """Write one `dvc plots` data file: reports/plots_data/<kind>/<name>.json (dvc.yaml `plots:`)."""
        write_json(self.out_dir / "plots_data" / kind / f"{name}.json", points)

    @property
    def headline_fpr(self) -> str | None:
        """The FPR shown with its interval: 1% when audit.fprs has it, else the configured one closest to it."""
        return min(self.fprs, key=lambda f: (abs(float(f) - 0.01), float(f)), default=None)


def pct(fpr: str) -> str:
    """0.01 -> 1%: an FPR key as a percentage."""
    return f"{float(fpr) * 100:g}%"


def processed_dirs(inp: Inputs, marker: str) -> list[Path]:
    """The processed datasets' folders that hold ``marker`` (stats.parquet, gx_results.json), by name."""
    folder = inp.where.processed
    return sorted(p for p in folder.iterdir() if (p / marker).is_file()) if folder.is_dir() else []
