"""params.yaml is validated at load with errors naming the bad key; it is the one source of every value."""
import dataclasses
import typing

import pytest

from stages.attack.params import AttackParams
from stages.audit.params import AuditParams
from stages.base_model.params import ModelParams
from stages.canaries.params import CanaryParams
from stages.core.errors import ConfigError
from stages.core.params import build, load, read_params, run_names, section_of
from stages.datasets import DATASETS
from stages.finetune.params import FinetuneParams, load_finetune
from stages.preprocess.params import PreprocessSection
from stages.report.params import ReportParams
from stages.secrets.params import SecretsParams
from support import ROOT

#: every params section and the dataclass that reads it (dataset params: each spec's own class)
SECTIONS = {"model": ModelParams, "canaries": CanaryParams, "finetune": FinetuneParams, "attack": AttackParams,
            "audit": AuditParams, "report": ReportParams, "secrets": SecretsParams, "preprocess": PreprocessSection,
            **{f"preprocess.datasets.{d}": DATASETS.get(d).params for d in DATASETS}}


def test_project_params_load_cleanly():
    raw = read_params(ROOT / "params.yaml")
    for section, cls in SECTIONS.items():
        assert dataclasses.is_dataclass(load(cls, section, raw=raw))
    for run in run_names(raw):
        assert isinstance(load_finetune(run, raw=raw), FinetuneParams)


def _leaves(cls, prefix):
    """Every field of ``cls`` as a dotted key, descending into nested params dataclasses."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        key = f"{prefix}.{f.name}"
        yield key
        if dataclasses.is_dataclass(hints[f.name]):
            yield from _leaves(hints[f.name], key)


def test_every_field_is_in_params_yaml_and_has_no_code_default():
    raw = read_params(ROOT / "params.yaml")
    for section, cls in SECTIONS.items():
        for key in _leaves(cls, section):
            parent, name = key.rsplit(".", 1)
            assert isinstance(section_of(raw, parent), dict) and name in section_of(raw, parent), \
                f"{key} is not in params.yaml"
        for f in dataclasses.fields(cls):
            assert f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING, \
                f"{section}.{f.name} has a code default: params.yaml must be its only source"


def test_a_key_missing_from_params_is_named():
    raw = read_params(ROOT / "params.yaml")
    del raw["audit"]["sanity_check"]["alpha"]
    with pytest.raises(ConfigError, match=r"params.yaml: audit\.sanity_check\.alpha: required key is missing"):
        load(AuditParams, "audit", raw=raw)


def test_every_params_key_is_tracked_by_a_dvc_stage():
    """`dvc params diff` shows every knob: each params.yaml leaf lies under a key some stage lists."""
    from dvc.dependency.param import ParamsDependency
    from dvc.repo import Repo

    with Repo(str(ROOT)) as repo:
        tracked = {p for stage in repo.index.stages for dep in stage.deps if isinstance(dep, ParamsDependency)
                   for p in (dep.params or [])}
    raw = read_params(ROOT / "params.yaml")

    def leaves(node, prefix):
        if isinstance(node, dict) and node:
            for k, v in node.items():
                yield from leaves(v, f"{prefix}.{k}" if prefix else k)
        else:
            yield prefix

    untracked = [k for k in leaves(raw, "") if not any(k == t or k.startswith(t + ".") for t in tracked)]
    assert not untracked, f"params no stage lists in dvc.yaml: {untracked}"


@pytest.mark.parametrize("section,cls,data,needle", [
    ("finetune", FinetuneParams, {"dp": {"epsilon": -1}}, "finetune.dp.epsilon: must be > 0"),
    ("finetune", FinetuneParams, {"dp": {"delta": 1.5}}, "finetune.dp.delta: must be in (0, 1)"),
    ("finetune", FinetuneParams, {"dp": {"max_grad_norm": 0}}, "finetune.dp.max_grad_norm"),
    ("finetune", FinetuneParams, {"dp": {"accountant": "gdp"}}, "finetune.dp.accountant: must be one of"),
    ("finetune", FinetuneParams, {"stepz": 3}, "finetune.stepz: unknown key"),
    ("finetune", FinetuneParams, {"steps": "many"}, "finetune.steps: expected an integer"),
    ("finetune", FinetuneParams, {"dataset": "imdb"}, "finetune.dataset: must be a dataset"),
    ("canaries", CanaryParams, {"secret_length": 0}, "canaries.secret_length: must be in [1, 8]"),
    ("canaries", CanaryParams, {"secret_length": 9}, "canaries.secret_length: must be in [1, 8]"),
    ("canaries", CanaryParams, {"kinds": "random"}, "canaries.kinds: expected a list"),
    ("canaries", CanaryParams, {"users": {"dataset": "tofu"}}, "canaries.users.dataset: must be a dataset with users"),
    ("audit", AuditParams, {"confidences": [0.95, 1.5]}, "audit.confidences"),
    ("preprocess.datasets.tofu", DATASETS.get("tofu").params, {"test_fraction": 1.0},
     "preprocess.datasets.tofu.test_fraction"),
])
def test_bad_values_name_the_key(section, cls, data, needle):
    from stages.core.params import deep_merge

    raw = read_params(ROOT / "params.yaml")
    node = section_of(raw, section)
    node.update(deep_merge(node, data))
    with pytest.raises(ConfigError) as exc:
        load(cls, section, raw=raw)
    assert needle in str(exc.value)
    assert "\n" not in str(exc.value)


def test_yaml_scientific_notation_string_is_a_float():
    raw = read_params(ROOT / "params.yaml")
    raw["audit"]["delta"] = "1e-5"
    assert build(AuditParams, raw["audit"], "audit").delta == 1e-5


def test_runs_are_deep_merged_and_errors_name_the_run():
    raw = read_params(ROOT / "params.yaml")
    raw["finetune"].update(steps=7, dp={**raw["finetune"]["dp"], "epsilon": 4.0})
    raw["runs"] = {"a": {}, "b": {"dp": {"enabled": True}}}
    a, b = load_finetune("a", raw=raw), load_finetune("b", raw=raw)
    assert (a.steps, a.dp.enabled, b.dp.enabled, b.dp.epsilon) == (7, False, True, 4.0)
    with pytest.raises(ConfigError, match=r"runs\.c: no such run"):
        load_finetune("c", raw=raw)
    raw["runs"]["b"]["dp"]["epsilon"] = -2
    with pytest.raises(ConfigError, match=r"runs\.b\.dp\.epsilon: must be > 0"):
        load_finetune("b", raw=raw)
    raw["runs"] = {"a": {}}
    raw["finetune"]["dp"]["epsilon"] = -1
    with pytest.raises(ConfigError, match=r"finetune\.dp\.epsilon: must be > 0"):
        load_finetune("a", raw=raw)
