"""params.yaml is validated at load with errors naming the bad key."""
import pytest

from stages.config import (AuditParams, CanaryParams, FinetuneParams, ModelParams, PreprocessParams, build, load,
                           load_finetune, read_params)
from stages.errors import ConfigError


def test_project_params_load_cleanly():
    raw = read_params("params.yaml")
    load(ModelParams, "model", raw=raw)
    load(PreprocessParams, "preprocess", raw=raw)
    load(CanaryParams, "canaries", raw=raw)
    load(AuditParams, "audit", raw=raw)
    for run in raw["runs"]:
        assert isinstance(load_finetune(run, raw=raw), FinetuneParams)


@pytest.mark.parametrize("section,cls,data,needle", [
    ("finetune", FinetuneParams, {"dp": {"epsilon": -1}}, "finetune.dp.epsilon: must be > 0"),
    ("finetune", FinetuneParams, {"dp": {"delta": 1.5}}, "finetune.dp.delta: must be in (0, 1)"),
    ("finetune", FinetuneParams, {"dp": {"max_grad_norm": 0}}, "finetune.dp.max_grad_norm"),
    ("finetune", FinetuneParams, {"dp": {"accountant": "gdp"}}, "finetune.dp.accountant: must be one of"),
    ("finetune", FinetuneParams, {"stepz": 3}, "finetune.stepz: unknown key"),
    ("finetune", FinetuneParams, {"steps": "many"}, "finetune.steps: expected an integer"),
    ("canaries", CanaryParams, {"secret_length": 0}, "canaries.secret_length: must be in [1, 8]"),
    ("canaries", CanaryParams, {"secret_length": 9}, "canaries.secret_length: must be in [1, 8]"),
    ("canaries", CanaryParams, {"kinds": "random"}, "canaries.kinds: expected a list"),
    ("audit", AuditParams, {"confidences": [0.95, 1.5]}, "audit.confidences"),
    ("preprocess", PreprocessParams, {"datasets": {"tofu": {"test_fraction": 1.0}}},
     "preprocess.datasets.tofu.test_fraction"),
])
def test_bad_values_name_the_key(section, cls, data, needle):
    with pytest.raises(ConfigError) as exc:
        load(cls, section, raw={section: data})
    assert needle in str(exc.value)
    assert "\n" not in str(exc.value)


def test_yaml_scientific_notation_string_is_a_float():
    assert build(AuditParams, {"delta": "1e-5"}, "audit").delta == 1e-5


def test_runs_are_deep_merged_and_errors_name_the_run():
    raw = {"finetune": {"steps": 7, "dp": {"epsilon": 4.0}}, "runs": {"a": {}, "b": {"dp": {"enabled": True}}}}
    a, b = load_finetune("a", raw=raw), load_finetune("b", raw=raw)
    assert (a.steps, a.dp.enabled, b.dp.enabled, b.dp.epsilon) == (7, False, True, 4.0)
    with pytest.raises(ConfigError, match=r"runs\.c: no such run"):
        load_finetune("c", raw=raw)
    raw["runs"]["b"]["dp"]["epsilon"] = -2
    with pytest.raises(ConfigError, match=r"runs\.b\.dp\.epsilon: must be > 0"):
        load_finetune("b", raw=raw)
    with pytest.raises(ConfigError, match=r"finetune\.dp\.epsilon: must be > 0"):
        load_finetune("a", raw={"finetune": {"dp": {"epsilon": -1}}, "runs": {"a": {}}})
