"""params.yaml is validated at load with errors naming the bad key; it is the one source of every value."""
import dataclasses
import typing

import pytest
from testkit.project import ROOT

from stages.audit.params import AuditParams
from stages.canaries.params import CanaryParams
from stages.finetune.params import FinetuneParams, load_finetune
from stages.params import SECTIONS as ROOT_SECTIONS
from stages.params import TOP_LEVEL, load_params, validate_params
from stages.shared.core.artifacts import KEYS, Locations
from stages.shared.core.errors import ConfigError
from stages.shared.core.params import Accountant, build, deep_merge, load, read_params, run_names, section_of
from stages.shared.datasets import DATASETS

#: every params section and the dataclass that reads it: the root's sections (which refuse a top-level key without
#: one) and each dataset spec's own class
SECTIONS = {**ROOT_SECTIONS, **{f"preprocess.datasets.{d}": DATASETS.get(d).params for d in DATASETS}}


def _plain(value):
    """A loaded value as YAML would hold it: dataclasses as mappings, tuples as lists."""
    if dataclasses.is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _yaml(value):
    """A raw params value with YAML 1.1's scientific-notation strings (1e-5) read as the floats they mean."""
    if isinstance(value, dict):
        return {k: _yaml(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_yaml(v) for v in value]
    if isinstance(value, str):
        try:
            return float(value) if any(c in value.lower() for c in "e.") else value
        except ValueError:
            return value
    return value


def test_sections_cover_every_top_level_key():
    raw = read_params(ROOT / "params.yaml")
    assert set(TOP_LEVEL) == set(raw), "a section of params.yaml without its dataclass escapes validation"
    assert "variance" in SECTIONS and "selfcheck" in SECTIONS


def test_project_params_load_to_the_values_in_the_file():
    """Every section loads to exactly the values params.yaml holds, and every run to ``finetune`` deep-merged
    with its ``runs.<run>`` entry (a loader that dropped, defaulted or altered a value fails here)."""
    raw = read_params(ROOT / "params.yaml")
    for section, cls in SECTIONS.items():
        assert _plain(load(cls, section, raw=raw)) == _yaml(section_of(raw, section)), section
    assert run_names(raw) == ["nondp", "dp_eps8", "users", "user_dp"]
    for run in run_names(raw):
        merged = deep_merge(raw["finetune"], raw["runs"][run] or {})
        assert _plain(load_finetune(run, raw=raw)) == _yaml(merged), run
    assert load_finetune("dp_eps8", raw=raw).dp.enabled and not load_finetune("nondp", raw=raw).dp.enabled


def test_root_params_are_the_sections_and_runs():
    raw = read_params(ROOT / "params.yaml")
    p = load_params(ROOT / "params.yaml")
    for section in ROOT_SECTIONS:
        assert _plain(getattr(p, section)) == _yaml(raw[section]), section
    assert list(p.runs) == run_names(raw) and p.runs["dp_eps8"] == load_finetune("dp_eps8", raw=raw)
    assert list(p.datasets) == list(raw["preprocess"]["datasets"])
    assert p.locations.models.as_posix() == p.finetune.out_dir and p.locations.metrics.as_posix() == p.audit.out


def test_locations_are_declared_once_with_their_params_keys():
    raw = read_params(ROOT / "params.yaml")
    p = load_params(ROOT / "params.yaml")
    assert list(KEYS) == [f.name for f in dataclasses.fields(Locations)]
    for name, key in KEYS.items():
        assert getattr(p.locations, name).as_posix() == section_of(raw, key), name
    raw["attack"]["out_dir"] = ""
    with pytest.raises(ConfigError, match=r"params.yaml: attack\.out_dir: expected a non-empty path"):
        validate_params(raw)


@pytest.mark.parametrize("edit,needle", [
    (lambda r: r.update(extra={}), "params.yaml: extra: unknown section (known: model, "),
    (lambda r: r.pop("variance"), "params.yaml: variance: required section is missing"),
    (lambda r: r["variance"].update(min_points=2), "params.yaml: variance.min_points: must be >= 3"),
    (lambda r: r["selfcheck"].update(accountant="gdp"), "params.yaml: selfcheck.accountant: must be one of 'prv'"),
    (lambda r: r["audit"]["primary"].update(kind="unigram"),
     "params.yaml: audit.primary.kind: must be one of canaries.kinds (new_token) (got 'unigram')"),
    (lambda r: r["attack"]["runs"].update(nodp=["loss"]),
     "params.yaml: attack.runs.nodp: no such run in runs (known: nondp, dp_eps8, users, user_dp)"),
    (lambda r: r["attack"]["runs"].pop("dp_eps8"),
     "params.yaml: attack.runs.dp_eps8: missing: every run names its attacks here (null: the default list"),
    (lambda r: r["audit"]["primary"]["runs"].update(dp={"k_pos": 1, "k_neg": 1}),
     "params.yaml: audit.primary.runs.dp: no such run in runs"),
    (lambda r: r["audit"]["ceiling"]["planned"]["gpu_dp_audit"].update(accountant="gdp"),
     "audit.ceiling.planned.gpu_dp_audit.accountant: must be one of 'prv', 'rdp' (got 'gdp')"),
    (lambda r: r["runs"]["users"].update(dp={"accountant": "gdp"}), "runs.users.dp.accountant: must be one of"),
    (lambda r: r["preprocess"]["datasets"].update(imdb={}), "preprocess.datasets: unknown dataset 'imdb'"),
    (lambda r: r["study"].update(recipe_seed=999),
     "params.yaml: audit.seeds.development: must list every seed the design study used (missing [999])"),
], ids=["unknown-section", "missing-section", "variance", "selfcheck", "primary-kind", "attack-runs",
        "attack-runs-entry", "primary-runs", "planned-accountant", "run-override", "dataset", "study-seed"])
def test_whole_params_validation_names_the_bad_key(edit, needle):
    raw = read_params(ROOT / "params.yaml")
    edit(raw)
    with pytest.raises(ConfigError) as exc:
        validate_params(raw)
    assert needle in str(exc.value) and "\n" not in str(exc.value)


def test_a_params_file_with_several_problems_lists_them_all():
    raw = read_params(ROOT / "params.yaml")
    raw["attack"]["attacks"] = ["loss", "telepathy"]  # an unknown name, and the primary attack missing
    raw["variance"]["min_points"] = 2
    raw["finetune"]["steps"] = 0  # the shared section: said once, not again for every run over it
    with pytest.raises(ConfigError) as exc:
        validate_params(raw)
    lines = str(exc.value).splitlines()
    assert len(lines) == 4 and all(line.startswith("params.yaml: ") for line in lines)
    assert any(line.startswith("params.yaml: attack.attacks[1]: unknown attack 'telepathy' (known: ")
               for line in lines)
    assert any(line.startswith("params.yaml: attack.attacks: lacks 'contrast'") for line in lines)
    assert any("variance.min_points: must be >= 3" in line for line in lines)
    assert sum("finetune.steps" in line for line in lines) == 1


def test_cross_section_rules_hold_when_a_stage_loads_its_section_alone():
    from stages.attack.params import AttackParams

    raw = read_params(ROOT / "params.yaml")
    raw["audit"]["primary"]["kind"] = "unigram"
    raw["attack"]["runs"]["nodp"] = ["loss"]
    with pytest.raises(ConfigError, match=r"audit\.primary\.kind: must be one of canaries\.kinds"):
        load(AuditParams, "audit", raw=raw)
    with pytest.raises(ConfigError, match=r"attack\.runs\.nodp: no such run"):
        load(AttackParams, "attack", raw=raw)


def test_every_accountant_key_has_the_one_accountant_type():
    found = []

    def walk(cls, prefix):
        for f in dataclasses.fields(cls):
            tp = typing.get_type_hints(cls)[f.name]
            if f.name == "accountant":
                found.append(prefix + f.name)
                assert tp == Accountant, f"{prefix}{f.name}: {tp} is not stages.shared.core.params.Accountant"
            for arg in (tp, *typing.get_args(tp)):
                if dataclasses.is_dataclass(arg):
                    walk(arg, f"{prefix}{f.name}.")

    for section, cls in SECTIONS.items():
        walk(cls, f"{section}.")
    assert sorted(found) == ["audit.ceiling.planned.accountant", "finetune.dp.accountant", "selfcheck.accountant",
                             "user_level.accountant"]


def _leaves(cls, prefix):
    """Every field of ``cls`` as a dotted key, descending into nested params dataclasses."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        key = f"{prefix}.{f.name}"
        yield key
        if dataclasses.is_dataclass(hints[f.name]):
            yield from _leaves(hints[f.name], key)


def _classes(cls):
    """``cls`` and every params dataclass nested in it (in a field, an Optional, a list or a mapping)."""
    yield cls
    for tp in typing.get_type_hints(cls).values():
        for arg in (tp, *typing.get_args(tp), *(a for t in typing.get_args(tp) for a in typing.get_args(t))):
            if isinstance(arg, type) and dataclasses.is_dataclass(arg):
                yield from _classes(arg)


def test_every_field_is_in_params_yaml_and_has_no_code_default():
    raw = read_params(ROOT / "params.yaml")
    checked = set()
    for section, cls in SECTIONS.items():
        for key in _leaves(cls, section):
            parent, name = key.rsplit(".", 1)
            assert isinstance(section_of(raw, parent), dict) and name in section_of(raw, parent), \
                f"{key} is not in params.yaml"
        for c in _classes(cls):
            checked.add(c.__name__)
            for f in dataclasses.fields(c):
                assert f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING, \
                    f"{c.__name__}.{f.name} (under {section}) has a code default: params.yaml must be its only source"
    assert {"VarianceParams", "SweepParams", "SelfcheckParams", "PlannedRegime", "GuessRule"} <= checked


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
    ("audit", AuditParams, {"primary": {"confidences": [0.95, 1.5]}},
     "audit.primary.confidences: needs at least one, each in (0, 1)"),
    ("variance", SECTIONS["variance"], {"sweep": {"seeds": [0, 0]}}, "variance.sweep.seeds: needs at least one"),
    ("preprocess.datasets.tofu", DATASETS.get("tofu").params, {"test_fraction": 1.0},
     "preprocess.datasets.tofu.test_fraction"),
])
def test_bad_values_name_the_key(section, cls, data, needle):
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


@pytest.mark.parametrize("order", ["declaring first", "declaring last"])
def test_read_params_keeps_no_state_between_calls(tmp_path, order):
    """What a params file declares (a text dataset) resolves against that file's params only: loading another file
    before or after it changes nothing, in either order."""
    import yaml
    from testkit.data import text_project

    from stages.shared.datasets import dataset_names, get_dataset

    (tmp_path / "a").mkdir()
    declaring, _ = text_project(tmp_path / "a", {"path": "data/raw/tickets.jsonl", "text_field": "body"})
    raw = yaml.safe_load(declaring.read_text())
    raw["runs"]["mine_run"] = {"dataset": "mine", "secrets": "none"}
    raw["attack"]["runs"]["mine_run"] = None
    declaring.write_text(yaml.safe_dump(raw, sort_keys=False))
    plain = tmp_path / "b" / "params.yaml"
    plain.parent.mkdir()
    plain.write_text(yaml.safe_dump({**raw, "preprocess": {**raw["preprocess"], "datasets": {
        k: v for k, v in raw["preprocess"]["datasets"].items() if k != "mine"}}}, sort_keys=False))
    files = [declaring, plain] if order == "declaring first" else [plain, declaring]
    for path in files:
        if path == declaring:
            assert load_params(path).specs["mine"].name == "mine"
            assert "mine" in dataset_names(read_params(path))
        else:
            with pytest.raises(ConfigError, match=r"runs.mine_run.dataset: must be a dataset"):
                load_params(path)
            assert "mine" not in dataset_names(read_params(path))
            with pytest.raises(ConfigError, match="mine"):
                get_dataset("mine", read_params(path))
    with pytest.raises(ConfigError, match="mine"):
        get_dataset("mine")  # no params given: no memory of either file


def test_an_audit_rule_naming_an_attack_a_run_does_not_run_fails_at_load(tmp_path):
    """The README's own-data mistake (a run with canaries whose attack list omits the pre-registered test's attack)
    fails when params load, at any stage's start, in one line naming both keys, before anything trains."""
    import subprocess

    import yaml
    from testkit.project import PYTHON

    raw = read_params(ROOT / "params.yaml")
    raw["runs"]["nondp"] = {**(raw["runs"]["nondp"] or {}), "canaries": True}
    raw["attack"]["runs"]["nondp"] = ["loss", "ref_ratio"]
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    want = (r"attack.runs.nondp: lacks 'contrast', the attack audit.primary.attack names: run nondp trains canaries")
    with pytest.raises(ConfigError, match=want):
        load_params(path)
    proc = subprocess.run([PYTHON, "-m", "stages.base_model", "--params", str(path)], capture_output=True, text=True,
                          cwd=tmp_path)  # the first stage of the DAG refuses it before doing anything
    assert proc.returncode != 0 and proc.stderr.strip().count("\n") == 0, proc.stderr
    assert "attack.runs.nondp" in proc.stderr and "audit.primary.attack" in proc.stderr
    raw["runs"]["nondp"]["canaries"] = False  # no canaries: nothing for the primary test to score
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    assert load_params(path).attack.runs["nondp"] == ("loss", "ref_ratio")


def test_a_run_with_audit_users_must_run_the_user_level_tests_attack():
    """finetune.user_canaries without audit.user.attack in the run's attack list fails at load, naming both keys."""
    raw = read_params(ROOT / "params.yaml")
    raw["attack"]["runs"]["user_dp"] = ["loss"]
    with pytest.raises(ConfigError, match=r"attack.runs.user_dp: lacks 'contrast', the attack audit.user.attack"):
        validate_params(raw)
