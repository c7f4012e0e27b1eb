"""Assemble the report from the audit's metrics and ROC curves, data stats, secrets and dvc.lock: the sections
(``sections/``, one module each, each reading only what it shows) in report order, then report.md, index.html,
headline.md/json and lineage.json."""
from __future__ import annotations

from pathlib import Path

from ..attack.schema import read_record
from ..audit.schema import metrics_of, read_roc
from ..finetune.schema import read_auditor, read_run
from ..shared.core import lineage as lin
from ..shared.core.artifacts import Locations
from ..shared.core.formatting import flatten
from ..shared.core.io import atomic_file, read_json, write_json
from .headline import headline_markdown, headline_metrics
from .inputs import Inputs
from .render import to_html, to_markdown
from .sections.audit import audit_section
from .sections.blind import blind_section
from .sections.canary_designs import canary_designs_section
from .sections.ceiling import ceiling_section
from .sections.contracts import contracts_section
from .sections.data import data_section
from .sections.exploratory import exploratory_section
from .sections.exposure import exposure_section
from .sections.headline import headline_section
from .sections.headline_lineage import headline_lineage_section
from .sections.lineage import lineage_section
from .sections.membership import mia_section
from .sections.memorization import memorization_section
from .sections.positive_control import positive_control_section
from .sections.response import response_section
from .sections.secrets import secrets_section
from .sections.selfcheck import selfcheck_section
from .sections.study import study_section
from .sections.summary import summary_section
from .sections.sweeps import sweeps_section
from .sections.training import training_section
from .sections.user_inference import user_inference_section
from .sections.user_level import user_audit_section, user_comparison_section, user_level_section
from .sections.variance import variance_section

#: the report's sections, in order; a section with nothing to show returns None and is left out
SECTIONS = (headline_section, summary_section,
            lambda inp: selfcheck_section(inp.selfcheck, inp.selfcheck_mutants), audit_section,
            ceiling_section,
            lambda inp: response_section(inp.runs, inp.auditor), lambda inp: study_section(inp.study_dir, inp.threats),
            exploratory_section, positive_control_section, mia_section, blind_section, canary_designs_section,
            lambda inp: user_audit_section(inp.runs, inp.bounds),
            lambda inp: user_comparison_section(inp.user_level),
            lambda inp: user_level_section(inp.user_level_plan), user_inference_section, sweeps_section,
            lambda inp: variance_section(inp.variance_dir), exposure_section,
            memorization_section, training_section, data_section, contracts_section, secrets_section,
            headline_lineage_section, lineage_section)


def threat_models(where: Locations, runs: list[str]) -> dict[str, str]:
    """attack -> the threat model it declares, as its runs' attack records hold it."""
    return {a: meta["threat_model"] for r in runs for a, meta in read_record(where.scores_dir(r)).attacks.items()}


def build_report(title: str, where: Locations, lock_path: Path, out_dir: Path, root: Path = Path("."),
                 variance_dir: Path | None = None, study_dir: Path | None = None,
                 selfcheck: Path | None = None, selfcheck_mutants: Path | None = None,
                 user_level_plan: Path | None = None, user_level: Path | None = None,
                 user_inference: Path | None = None, positive_control: Path | None = None,
                 positive_control_power: Path | None = None) -> dict:
    """Write report.md, index.html, the plots and lineage.json into ``out_dir``; returns the lineage."""
    lock = lin.load_lock(lock_path)
    git = lin.git_state(root)
    numbers_file = read_json(where.metrics, "audit")  # the lineage ids are its JSON paths
    metrics = metrics_of(numbers_file, str(where.metrics))
    verified = lin.verify_outputs(lock, "audit")
    inp = Inputs(metrics, read_roc(where.roc), where, lock, git, verified, out_dir / "plots", out_dir,
                 lin.number_lineage(numbers_file, lock, git, verified),
                 {r: read_run(where.run_dir(r), r).base_model for r in metrics.runs},
                 variance_dir, study_dir, selfcheck, threat_models(where, list(metrics.runs)),
                 {r: read_auditor(where.run_dir(r), r) for r in metrics.runs}, selfcheck_mutants,
                 user_level_plan, user_level, user_inference, positive_control, positive_control_power)
    sections = [s for s in (section(inp) for section in SECTIONS) if s is not None]
    with atomic_file(out_dir / "report.md") as tmp:
        tmp.write_text(to_markdown(title, sections, out_dir))
    with atomic_file(out_dir / "index.html") as tmp:
        tmp.write_text(to_html(title, sections))
    heads = inp.heads
    with atomic_file(out_dir / "headline.md") as tmp:  # the Prefect run's markdown artifact
        tmp.write_text(headline_markdown(heads, link=False))
    numbers = flatten(numbers_file, numbers_only=True)
    write_json(out_dir / "headline.json", headline_metrics(heads, numbers, inp.runs, inp.bounds))
    write_json(out_dir / "lineage.json", inp.lineage)
    return inp.lineage
