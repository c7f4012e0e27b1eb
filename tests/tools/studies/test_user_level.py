"""The user-level plan's ideals (stages/tools/studies/user_level.py): under example-level DP a canary user's k rows add
k
times the inclusions against the same noise, under user-level DP one unit's; the published point (epsilon 2, q 0.23,
T 10, 1000 canary users, 100 "in" guesses: about 2.49 at k = 4, the 3.47 cap at k = 8, about 0.4 user-level)."""
from dataclasses import replace

import pytest
from testkit import records
from testkit.records import group, run_metrics

from stages.audit.schema import SeedStatus
from stages.shared.bounds.ceiling import ideal_counts
from stages.shared.core.errors import ConfigError
from stages.shared.core.params import build
from stages.tools.studies.user_level import UserLevelPlanParams, plan_ideals, user_ideal


def test_one_row_per_user_is_the_single_canary_ideal_under_either_unit():
    a = ideal_counts(0.23, 10, 1.9, m=200, k_pos=20, k_neg=0, trials=50, seed=3)
    assert ideal_counts(0.23, 10, 1.9, m=200, k_pos=20, k_neg=0, trials=50, seed=3, rows=1) == a  # unchanged draws
    ex = user_ideal(0.23, 10, 1.9, unit="example", rows=1, m=200, k_pos=20, delta=1e-5, confidence=0.95, trials=200,
                    seed=1)
    us = user_ideal(0.23, 10, 1.9, unit="user", rows=1, m=200, k_pos=20, delta=1e-5, confidence=0.95, trials=200,
                    seed=1)
    assert ex["ideal_eps_lb_95_median"] == us["ideal_eps_lb_95_median"]
    with pytest.raises(ValueError, match="unit 'group'"):
        user_ideal(0.23, 10, 1.9, unit="group", rows=1, m=200, k_pos=20, delta=1e-5, confidence=0.95, trials=10,
                   seed=1)


def test_the_plan_reproduces_the_published_ordering():
    plan = plan_ideals(epsilon=2.0, delta=1e-5, sample_rate=0.23, steps=10, rows=[4, 8], m=1000, k_pos=100,
                       confidence=0.95, trials=600, seed=0)
    med = {(r["unit"], r["rows"]): r["ideal_eps_lb_95_median"] for r in plan["rows"]}
    assert med[("example", 4)] == pytest.approx(2.49, abs=0.15)
    assert med[("example", 8)] == pytest.approx(plan["cap_eps_lb"]) == pytest.approx(3.47, abs=0.01)
    assert med[("user", 4)] < 0.6 and med[("user", 8)] < 0.6  # a user's rows clipped as one unit: a single row's
    assert med[("example", 4)] > plan["epsilon"] > med[("user", 4)]  # the ideal exceeds epsilon only per example


def test_the_design_is_validated_naming_the_key():
    good = dict(epsilon=2.0, delta=1e-5, sample_rate=0.23, steps=10, accountant="prv", rows=[1, 4], m=1000, k_pos=100,
                confidence=0.95, trials=1000, seed=0, confirmation_seeds=[1], prediction="p", out="x.json")
    assert build(UserLevelPlanParams, good, "user_level").rows == (1, 4)
    with pytest.raises(ConfigError, match="user_level.m: must be >= 1000"):
        build(UserLevelPlanParams, {**good, "m": 16, "k_pos": 10}, "user_level")


def _test(template, v, lb, ideal=None, **fields):
    """``template`` (a committed AuditUser or Primary) with the fields the comparison reads replaced; a DP run's
    ideal only with ``ideal``."""
    bounds = {"eps_lb_95": lb, **({"ideal_eps_lb_95_median": ideal} if ideal is not None else {})}
    return replace(template, m=1000, r=100, v=v, delta=1e-5, bounds=bounds, seeds=[3401],
                   seed_status=SeedStatus.CONFIRMATION, ideal_percentile=40.0 if ideal is not None else None, **fields)


def test_the_comparison_has_one_row_per_mechanism_and_audit_unit_with_the_issues_keys():
    from stages.tools.studies.user_level import MECHANISMS, ROW_KEYS, comparison_rows

    def run(dp, unit, lb_user):
        privacy = (replace(run_metrics("user_dp").privacy, epsilon_spent=2.0, unit=unit) if dp
                   else run_metrics("nondp").privacy)
        user = _test(run_metrics("user_dp").audit_user, 80, lb_user, 0.4 if dp else None, k=4, members=490,
                     non_members=510, canary_user_auroc=0.6, canary_user_auroc_ci95=[0.55, 0.65])
        primary = _test(run_metrics("dp_eps8").audit_primary, 60, 0.2, 0.3 if dp else None, attack="contrast",
                        kind="new_token")
        base = run_metrics()
        return run_metrics(privacy=privacy, audit_user=user, audit_primary=primary,
                           utility=replace(base.utility, valid_perplexity=30.0),
                           attacks={"contrast": {"new_token": group(0.55, 480, 520, auroc_ci95=[0.5, 0.6])}})

    metrics = records.metrics(runs={"ul_example": run(True, "example", 2.4), "ul_user": run(True, "user", 0.3),
                                    "ul_nondp": run(False, None, 3.4)})
    rows = comparison_rows(metrics, "abc")
    assert len(rows) == 2 * len(MECHANISMS) and all(tuple(r) == ROW_KEYS for r in rows)
    by = {(r["mechanism"], r["unit"]): r for r in rows}
    assert by[("user-level DP-SGD", "user")]["eps_lb_95"] == 0.3 and by[("user-level DP-SGD", "user")]["k"] == 4
    assert by[("example-level DP-SGD", "example")]["k"] == 1 and by[("no DP", "user")]["epsilon"] is None
    assert by[("no DP", "user")]["ideal_eps_lb_95_median"] is None and by[("no DP", "user")]["design_commit"] == "abc"
    assert by[("example-level DP-SGD", "example")]["members"] == 480  # the canaries' counts, not the users'
    assert type(by[("no DP", "user")]["seed_status"]) is str  # the table's rows are plain JSON values


def test_the_flows_overrides_give_valid_params_for_each_mechanism(tmp_path):
    """presets/user_level.args plus the design's overrides: three runs at the design's (epsilon, delta, q, T), the
    DP unit of each, k rows per audit user and one seed for every draw; the default runs dropped."""
    import shutil
    from pathlib import Path

    from dvc.utils.hydra import apply_overrides
    from testkit.project import ROOT

    from flows.user_level import overrides
    from stages.finetune.params import load_finetune
    from stages.params import validate_params
    from stages.shared.core.params import load, read_params

    raw = read_params(ROOT / "params.yaml")
    design = load(UserLevelPlanParams, "user_level", ROOT / "params.yaml", raw)
    for f in ("params.yaml", "studies.yaml"):
        shutil.copy(ROOT / f, tmp_path / f)
    apply_overrides(str(tmp_path / "params.yaml"), overrides(Path(ROOT), design, 4, 3401))
    p = read_params(tmp_path / "params.yaml")
    validate_params(p)
    assert list(p["runs"]) == ["ul_example", "ul_user", "ul_nondp"] and not p["replicas"]["sets"]
    units = {}
    for run in p["runs"]:
        ft = load_finetune(run, tmp_path / "params.yaml", p)
        assert (ft.sample_rate, ft.steps, ft.seed, ft.user_canaries, ft.canaries) == (0.23, 10, 3401, True, True)
        units[run] = ft.dp.unit if ft.dp.enabled else None
        if ft.dp.enabled:
            assert (ft.dp.epsilon, ft.dp.delta) == (design.epsilon, design.delta)
    assert units == {"ul_example": "example", "ul_user": "user", "ul_nondp": None}
    assert p["canaries"]["audit_users"]["rows"] == 4 and p["canaries"]["seed"] == 3401
    with pytest.raises(ConfigError, match="--k 3"):
        overrides(Path(ROOT), design, 3, 3401)
    with pytest.raises(ConfigError, match="--seed 5"):
        overrides(Path(ROOT), design, 4, 5)
