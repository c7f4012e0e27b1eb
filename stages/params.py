"""The root of params.yaml: every section typed, every run resolved, the cross-section rules checked, once.

``load_params()`` (a file) and ``validate_params(raw)`` (a mapping: a sweep, variance or study point before it
is dispatched) return one frozen ``Params``: each section built by its stage's own dataclass, ``runs.<run>``
deep-merged over ``finetune``, each ``preprocess.datasets.<name>`` built by its dataset spec's class and the
artifact ``Locations``. A top-level key without a section class, or a section missing from the file, is
refused, so no section escapes validation. Rules between sections (the audit's primary kind is a configured
canary kind; ``attack.runs`` and ``audit.primary.runs`` name configured runs) are the sections' own
``relations()``, which ``stages.shared.core.params.load`` also runs when a stage loads its section alone.

Why here and not in core: the root must know every stage's section class, and core imports nothing from the
stages. Why no stage imports it: a stage's DVC deps are its import closure, so a stage loading the root would
rerun on any edit of any stage's params module. Stages load their own section (``load``); the entry points
that dispatch work (``leakaudit run``, the sweep, variance and study flows) and the tests load the root.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stages.attack.params import AttackParams
from stages.audit.params import AuditParams
from stages.base_model.params import ModelParams
from stages.canaries.params import CanaryParams
from stages.finetune.params import FinetuneParams, load_finetune
from stages.preprocess.params import PreprocessSection
from stages.reference.params import ReferenceParams
from stages.report.params import ReportParams
from stages.secrets.params import SecretsParams
from stages.shared.core.artifacts import Locations, locations
from stages.shared.core.errors import ConfigError
from stages.shared.core.params import PARAMS_FILE, load, read_params, run_names, section_of
from stages.shared.core.replicas import ReplicaParams
from stages.shared.core.requirements import run_requirements
from stages.shared.datasets import DatasetSpec, get_dataset
from stages.shared.studies.positive_control import PositiveControlParams
from stages.shared.studies.user_inference import UserInferenceStudyParams
from stages.shared.studies.user_level import UserLevelPlanParams
from stages.tools.selfcheck.params import SelfcheckParams
from stages.tools.studies.params import StudyParams
from stages.variance.params import VarianceParams

#: every top-level section of params.yaml (besides ``runs``) and the dataclass that reads it, in pipeline order
SECTIONS: dict[str, type] = {
    "model": ModelParams,
    "preprocess": PreprocessSection,
    "secrets": SecretsParams,
    "canaries": CanaryParams,
    "finetune": FinetuneParams,
    "replicas": ReplicaParams,
    "reference": ReferenceParams,
    "attack": AttackParams,
    "audit": AuditParams,
    "study": StudyParams,
    "report": ReportParams,
    "variance": VarianceParams,
    "selfcheck": SelfcheckParams,
    "user_level": UserLevelPlanParams,
    "user_inference": UserInferenceStudyParams,
    "positive_control": PositiveControlParams,
    "positive_control_power": PositiveControlParams,  # its power follow-up, the same shape
}
#: the top-level keys of params.yaml
TOP_LEVEL = (*SECTIONS, "runs")


@dataclass(frozen=True)
class Params:
    model: ModelParams
    preprocess: PreprocessSection
    secrets: SecretsParams
    canaries: CanaryParams
    finetune: FinetuneParams
    replicas: ReplicaParams
    reference: ReferenceParams
    attack: AttackParams
    audit: AuditParams
    study: StudyParams
    report: ReportParams
    variance: VarianceParams
    selfcheck: SelfcheckParams
    user_level: UserLevelPlanParams
    user_inference: UserInferenceStudyParams
    positive_control: PositiveControlParams
    positive_control_power: PositiveControlParams
    #: run name -> its fine-tune params (``runs.<run>`` deep-merged over ``finetune``)
    runs: dict[str, FinetuneParams]
    #: dataset name -> its params (``preprocess.datasets.<name>``, the spec's own dataclass)
    datasets: dict[str, Any]
    #: dataset name -> its spec, resolved from these params (a text dataset's from its entry): what a caller passes
    #: on, as nothing resolves a name from memory
    specs: dict[str, DatasetSpec]
    locations: Locations


def validate_params(raw: dict, path: str | Path = PARAMS_FILE) -> Params:
    """The whole params mapping validated: one ConfigError listing every problem found, a line
    ``<path>: <dotted key>: <problem>`` each (names only params declare, a text dataset's, resolve against ``raw``).
    A section that does not build is reported once; what reads it (its datasets, the runs over ``finetune``) is
    checked once it builds."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    return _validate(raw, path)


def _validate(raw: dict, path: str | Path) -> Params:
    problems: list[str] = []

    def attempt(fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except ConfigError as exc:
            problems.extend(str(exc).splitlines())
            return None

    problems += [f"{path}: {name}: unknown section (known: {', '.join(TOP_LEVEL)})" for name in raw
                 if name not in TOP_LEVEL]
    problems += [f"{path}: {name}: required section is missing" for name in TOP_LEVEL if name not in raw]
    sections = {name: attempt(load, cls, name, path, raw) for name, cls in SECTIONS.items() if name in raw}
    problems += [f"{path}: {key}: {msg}" for key, msg in run_requirements(raw) + unknown_attacks(raw)]
    datasets, specs = {}, {}
    if sections.get("preprocess") is not None:
        for name in sections["preprocess"].datasets:
            spec = attempt(get_dataset, name, raw, key=f"{path}: preprocess.datasets")
            if spec is not None:
                specs[name] = spec
                datasets[name] = attempt(load, spec.params, f"preprocess.datasets.{name}", path, raw)
    names = attempt(run_names, raw, path) or []
    runs = ({run: attempt(load_finetune, run, path, raw) for run in names}
            if sections.get("finetune") is not None else {})
    where = attempt(locations, raw, path)
    if problems:
        raise ConfigError("\n".join(dict.fromkeys(problems)))
    return Params(**sections, runs=runs, datasets=datasets, specs=specs, locations=where)


def unknown_attacks(raw: dict) -> list[tuple[str, str]]:
    """``[(dotted key, problem)]``: each name in an attack list (``attack.attacks``, ``attack.runs.<run>``,
    ``replicas.attacks``) that no attack registers. The attack stage refuses them too, but only when it runs."""
    from stages.attack.catalog import ATTACKS

    lists = [(key, section_of(raw, key)) for key in ("attack.attacks", "replicas.attacks")]
    per_run = section_of(raw, "attack.runs")
    lists += [(f"attack.runs.{run}", names) for run, names in (per_run.items() if isinstance(per_run, dict) else ())]
    return [(f"{key}[{i}]", f"unknown attack {name!r} (known: {', '.join(ATTACKS.names())})")
            for key, names in lists if isinstance(names, list) for i, name in enumerate(names) if name not in ATTACKS]


def load_params(path: str | Path = PARAMS_FILE, raw: dict | None = None) -> Params:
    """The root params of ``path`` (or of ``raw``, read from it), validated once."""
    return validate_params(read_params(path) if raw is None else raw, path)
