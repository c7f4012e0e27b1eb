"""The positive control (stages/tools/studies/positive_control.py, flows/positive_control.py): the design is validated
naming the key, each checkpoint is a run at q T epochs with the DP counterpart at the last one's steps, the flow's
overrides give valid params, the rows are read off metrics.json, and each prediction's verdict follows its checks."""
import math
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from testkit import records
from testkit.records import group, run_metrics

from stages.audit.schema import Arm, Memorization, RunMetrics, Utility, instrument_rows
from stages.finetune.schema import PrivacyRecord
from stages.shared.core.errors import ConfigError
from stages.shared.core.params import build
from stages.shared.studies.positive_control import Experiment, UsersLoss
from stages.shared.studies.rows import EiaRow, ValueRow
from stages.tools.studies.positive_control import (
    CONFIRMED,
    NOT_CONFIRMED,
    NOT_MEASURED,
    PositiveControlParams,
    dataset_rows,
    runs_of,
    users_loss,
    verdicts,
)

GOOD = dict(epochs=[1, 2, 4], recipe={"paradigm": "full", "lr": 1e-4}, dp={"epsilon": 8.0, "delta": 1e-5}, seed=9,
            datasets={"tofu_authors": {"run": {"max_length": 48}, "steps_per_epoch": 4,
                                       "attacks": ["loss", "ez_mia", "user_inference", "blind"]}},
            predictions={"text_mia": "t", "user_inference": "u", "vmr": "v", "dose": "d", "gap": "g", "newer": "n",
                         "dp": "p"})


def test_the_design_is_validated_naming_the_key():
    assert build(PositiveControlParams, GOOD, "positive_control").epochs == (1, 2, 4)
    for bad, key in (({"epochs": [2, 1]}, "epochs"), ({"dp": {"epsilon": 8.0}}, "dp"),
                     ({"predictions": {"telepathy": "x"}}, "predictions"),
                     ({"datasets": {"tofu_authors": {**GOOD["datasets"]["tofu_authors"], "attacks": ["telepathy"]}}},
                      "datasets")):
        with pytest.raises(ConfigError, match=f"positive_control.{key}"):
            build(PositiveControlParams, {**GOOD, **bad}, "positive_control")


def test_each_checkpoint_is_a_run_at_q_t_epochs_and_the_dp_counterpart_takes_the_last_steps():
    from testkit.project import ROOT

    from stages.shared.core.params import read_params

    design = build(PositiveControlParams, GOOD, "positive_control")
    raw = read_params(ROOT / "params.yaml")
    runs = runs_of(design, "tofu_authors", raw)
    assert list(runs) == ["pc_tofu_authors_e1", "pc_tofu_authors_e2", "pc_tofu_authors_e4", "pc_tofu_authors_dp"]
    for name, run in runs.items():
        assert run["sample_rate"] == 0.25 and run["seed"] == 9 and run["paradigm"] == "full"
        assert run["secrets"] == "none"  # the secrets file its dataset has (dvc.yaml reads the run's own entry)
        assert ("dp" in run) == name.endswith("_dp")
    assert [r["steps"] * r["sample_rate"] for r in runs.values()] == [1, 2, 4, 4]  # q T: the epochs
    assert runs["pc_tofu_authors_dp"]["dp"] == {"enabled": True, "epsilon": 8.0, "delta": 1e-5}


def test_the_flows_overrides_give_valid_params_with_only_the_studys_runs(tmp_path):
    from dvc.utils.hydra import apply_overrides
    from testkit.project import ROOT

    from flows.positive_control import PRESET
    from flows.runtime.experiments import preset_lines
    from stages.finetune.params import load_finetune
    from stages.params import validate_params
    from stages.shared.core.params import load, read_params
    from stages.shared.datasets import secrets_of
    from stages.tools.studies.positive_control import study_overrides

    raw = read_params(ROOT / "params.yaml")
    design = load(PositiveControlParams, "positive_control", ROOT / "params.yaml", raw)
    for f in ("params.yaml", "studies.yaml"):
        shutil.copy(ROOT / f, tmp_path / f)
    dataset = next(iter(design.datasets))
    apply_overrides(str(tmp_path / "params.yaml"), preset_lines(Path(ROOT), PRESET)
                    + study_overrides(design, dataset, raw))
    p = read_params(tmp_path / "params.yaml")
    validate_params(p)
    assert list(p["runs"]) == list(runs_of(design, dataset, raw)) and not p["replicas"]["sets"]
    for run in p["runs"]:
        ft = load_finetune(run, tmp_path / "params.yaml", p)
        assert ft.dataset == dataset and ft.paradigm == "full" and not ft.canaries and ft.seed == design.seed
        assert ft.secrets == secrets_of(dataset, p)
        assert ft.dp.enabled == run.endswith("_dp")
        assert p["attack"]["runs"][run] == list(design.datasets[dataset]["attacks"])
    with pytest.raises(ConfigError, match="--dataset personachat"):
        study_overrides(design, "personachat", raw)


def _auroc(auroc, ci=None, p=None, members=20, non_members=20):
    return group(auroc, members, non_members, auroc_ci95=ci, auroc_p_exact=p)


def _arm(value, ci):
    return Arm(secrets=16, score=None, base_score=None, minus_base=value, max_minus_base=None, minus_base_ci95=ci)


def _run(strength: float, dp: bool = False) -> RunMetrics:
    """A run's metrics.json entry whose text attacks and user inference sit at ``strength`` (interval +-0.1)."""
    ci = [strength - 0.1, strength + 0.1]
    base = run_metrics()
    return run_metrics(
        privacy=PrivacyRecord(dp=dp, epsilon_spent=7.9 if dp else math.inf, delta=1e-5 if dp else None,
                              sample_rate=0.25, steps=8),
        training=replace(base.training, steps=8, sample_rate=0.25), utility=Utility(valid_nll=2.0,
                                                                                    valid_perplexity=None),
        attacks={"loss": {"text": _auroc(strength, ci)}, "ez_mia": {"text": _auroc(strength + 0.01, ci)},
                 "user_inference": {"users": _auroc(strength, ci)}},
        blind={"text": replace(base.blind["text"], auroc=0.5, auroc_ci95=[0.4, 0.6], members=20, non_members=20)},
        memorization={"vmr": Memorization(randomised=True, trained=_arm(strength - 0.5, [strength - 0.6,
                                                                                        strength - 0.4]),
                                          untrained=_arm(0.0, [0.0, 0.0]))},
        other={"eia": {"f1": 0.2}})


def _users(gap: float) -> list[dict]:
    return [{"member": True, "score": -2.0}, {"member": False, "score": -2.0 - gap}]


def test_rows_are_read_off_metrics_and_the_users_losses_give_the_gap():
    rows = instrument_rows(_run(0.7))
    assert {(r.instrument, r.pool) for r in rows} == {
        ("loss", "text"), ("ez_mia", "text"), ("user_inference", "users"), ("blind", "text"), ("vmr", "trained"),
        ("vmr", "held_out"), ("eia", "test")}
    vmr = next(r for r in rows if r.pool == "trained")
    assert isinstance(vmr, ValueRow) and vmr.value == pytest.approx(0.2) and vmr.members == 16
    eia = next(r for r in rows if r.instrument == "eia")
    assert isinstance(eia, EiaRow) and eia.baseline is None  # this run recorded no baseline: a null, not a gap
    assert users_loss(_users(0.5)) == UsersLoss(held_in=2.0, held_out=2.5, gap=0.5, users=(1, 1))
    assert users_loss([{"member": True, "score": -1.0}]).gap is None


def _experiment(design, strengths, gaps, dp_strength) -> Experiment:
    runs = {f"pc_tofu_authors_e{e}": _run(s) for e, s in zip(design.epochs, strengths)}
    metrics = records.metrics(runs={**runs, "pc_tofu_authors_dp": _run(dp_strength, dp=True)})
    users = {f"pc_tofu_authors_e{e}": _users(g) for e, g in zip(design.epochs, gaps)}
    users["pc_tofu_authors_dp"] = _users(0.0)
    checkpoints, rows = dataset_rows(design, "tofu_authors", metrics, users)
    return Experiment(experiment="positive-control-tofu-authors-s9", commit="0" * 40, dataset="tofu_authors",
                      params="p.yaml", lock="p.lock", seconds=None, checkpoints=checkpoints, rows=rows)


def test_each_prediction_is_confirmed_only_where_every_check_holds():
    design = build(PositiveControlParams, GOOD, "positive_control")
    seen = _experiment(design, [0.55, 0.7, 0.9], [0.1, 0.3, 0.8], dp_strength=0.5)
    by = {v.prediction: v for v in verdicts(design, [seen])}
    assert seen.checkpoints[-1].epsilon == 7.9 and seen.checkpoints[0].epsilon is None
    assert seen.checkpoints[1].users_loss.gap == pytest.approx(0.3)
    dp_rows = [r for r in seen.rows if r.checkpoint == "dp"]
    assert dp_rows and all(r.epsilon == 7.9 and r.run == "pc_tofu_authors_dp" for r in dp_rows)
    for p in ("text_mia", "user_inference", "vmr", "dose", "gap", "newer", "dp"):
        assert by[p].verdict == CONFIRMED, (p, by[p].checks)
    # weaker at the last checkpoint than at the first, the gap against the AUROC, a DP run that leaks
    blind = _experiment(design, [0.9, 0.7, 0.55], [0.8, 0.1, 0.3], dp_strength=0.9)
    by = {v.prediction: v for v in verdicts(design, [blind])}
    assert by["text_mia"].verdict == NOT_CONFIRMED and by["text_mia"].failed == 2  # loss and ez_mia
    assert by["dose"].verdict == NOT_CONFIRMED and by["gap"].verdict == NOT_CONFIRMED
    assert by["dp"].verdict == NOT_CONFIRMED
    assert by["vmr"].verdict == NOT_CONFIRMED and by["vmr"].failed == 1  # 0.05 above base: its interval
    assert by["vmr"].checks[0].value == pytest.approx([-0.05, 0.15])     # covers 0; still above held out
    assert {v.verdict for v in verdicts(design, [])} == {NOT_MEASURED}


def test_the_committed_verdicts_follow_from_the_committed_experiments():
    """The committed table read as records: its verdicts recomputed from its experiments equal those it records, and
    it writes back leaf for leaf (key order aside)."""
    import json

    from testkit.project import ROOT

    from stages.shared.core.records import record_json
    from stages.shared.studies.positive_control import read_table

    path = ROOT / "reports" / "positive_control.json"
    table = read_table(path)
    assert table.experiments and verdicts(table.design, table.experiments) == table.verdicts
    assert record_json(table) == json.loads(path.read_text())


def test_a_follow_up_without_dp_overrides_preprocessing_and_attack_leaf_by_leaf():
    from testkit.project import ROOT

    from stages.shared.core.params import read_params
    from stages.tools.studies.positive_control import checkpoints_of, study_overrides

    spec = {**GOOD["datasets"]["tofu_authors"], "preprocess": {"user_level": {"max_users": None}},
            "attack": {"generation": {"max_secrets": 86}}}
    design = build(PositiveControlParams, {**GOOD, "dp": None, "datasets": {"tofu_authors": spec}}, "power")
    raw = read_params(ROOT / "params.yaml")
    assert checkpoints_of(design) == (1, 2, 4) and "pc_tofu_authors_dp" not in runs_of(design, "tofu_authors", raw)
    lines = study_overrides(design, "tofu_authors", raw)
    # each leaf its own override, so the entry's other keys (min_rows, the other generation params) stay
    assert lines[:2] == ["++preprocess.datasets.tofu_authors.user_level.max_users=null",
                         "++attack.generation.max_secrets=86"]
    assert not any("dp:" in line for line in lines)
    for bad in ({"preprocess": 3}, {"telemetry": {}}):
        with pytest.raises(ConfigError, match="power.datasets"):
            build(PositiveControlParams, {**GOOD, "datasets": {"tofu_authors": {**spec, **bad}}}, "power")


def test_the_power_follow_ups_overrides_give_valid_params(tmp_path):
    """studies.yaml positive_control_power as the flow runs it: the preset's and the design's overrides give params
    that validate, with its users' layout and data contract, and only its runs."""
    from dvc.utils.hydra import apply_overrides
    from testkit.project import ROOT

    from flows.positive_control import PREFIXES, PRESET, experiment_name
    from flows.runtime.experiments import preset_lines
    from stages.finetune.params import load_finetune
    from stages.params import validate_params
    from stages.shared.core.params import load, read_params
    from stages.tools.studies.positive_control import study_overrides

    raw = read_params(ROOT / "params.yaml")
    design = load(PositiveControlParams, "positive_control_power", ROOT / "params.yaml", raw)
    assert design.dp is None and design.seed != load(PositiveControlParams, "positive_control",
                                                     ROOT / "params.yaml", raw).seed
    for dataset in design.datasets:
        for f in ("params.yaml", "studies.yaml"):
            shutil.copy(ROOT / f, tmp_path / f)
        apply_overrides(str(tmp_path / "params.yaml"), preset_lines(Path(ROOT), PRESET)
                        + study_overrides(design, dataset, raw))
        p = validate_params(read_params(tmp_path / "params.yaml"), tmp_path / "params.yaml")
        assert list(p.runs) == list(runs_of(design, dataset, raw))
        for run in p.runs:
            ft = load_finetune(run, tmp_path / "params.yaml", read_params(tmp_path / "params.yaml"))
            assert ft.dataset == dataset and not ft.dp.enabled and ft.seed == design.seed
    # no experiment prefix is a prefix of another: each table reads only its own design's experiments
    for s, prefix in PREFIXES.items():
        assert experiment_name("tofu_authors", 1, s).startswith(prefix)
        assert not any(b.startswith(prefix) for b in PREFIXES.values() if b != prefix)


def test_air_rows_are_read_like_vmr_and_its_prediction_checks_the_trained_arm():
    from stages.tools.studies.positive_control import prediction_checks

    run = _run(0.7)
    air = Memorization(randomised=True, trained=_arm(0.3, [0.1, 0.5]), untrained=_arm(0.0, [-0.1, 0.1]))
    run = replace(run, memorization={**run.memorization, "air": air})
    rows = {(r.instrument, r.pool): r for r in instrument_rows(run)}
    assert rows["air", "trained"].value == 0.3 and rows["air", "trained"].sees()
    assert not rows["air", "held_out"].sees() and rows["air", "held_out"].covers_chance()
    design = build(PositiveControlParams, {**GOOD, "epochs": [8], "dp": None}, "power")
    metrics = records.metrics(runs={"pc_tofu_authors_e8": run})
    checkpoints, got = dataset_rows(design, "tofu_authors", metrics, {"pc_tofu_authors_e8": []})
    ex = Experiment(experiment="pc-power-tofu-authors-s9", commit="0" * 40, dataset="tofu_authors", params="p",
                    lock="l", seconds=None, checkpoints=checkpoints, rows=got)
    assert [c.checkpoint for c in checkpoints] == [8] and checkpoints[0].users_loss.gap is None
    checks = prediction_checks(design, [ex])["air"]
    assert [c.holds for c in checks] == [True, True] and checks[0].value == [0.1, 0.5]
