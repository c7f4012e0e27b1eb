"""The GPU preset (presets/gpu_dp_audit.args) applies with DVC's own --set-param parser, yields a valid DP run, and
describes the same regime as the ceiling every report shows for it (audit.ceiling.planned.gpu_dp_audit)."""
import shutil

import pytest
from dvc.utils.hydra import apply_overrides
from testkit.project import ROOT

from stages.audit.params import AuditParams
from stages.finetune.params import load_finetune
from stages.shared.core.params import load, read_params


def test_gpu_preset_matches_its_planned_ceiling(tmp_path):
    lines = [ln for ln in (ROOT / "presets/gpu_dp_audit.args").read_text().splitlines()
             if ln.strip() and not ln.startswith("#")]
    assert all(" " not in ln for ln in lines)  # the documented $(grep | sed) command splits on whitespace
    path = tmp_path / "params.yaml"
    shutil.copy(ROOT / "params.yaml", path)
    shutil.copy(ROOT / "studies.yaml", tmp_path / "studies.yaml")
    apply_overrides(path, lines)
    raw = read_params(path)
    ft = load_finetune("gpu_dp_audit", path, raw)
    planned = load(AuditParams, "audit", path, raw).ceiling.planned["gpu_dp_audit"]
    assert ft.dp.enabled and ft.device == "auto"
    assert (ft.sample_rate, ft.steps, ft.dp.epsilon, ft.dp.delta, ft.dp.accountant) == pytest.approx(
        (planned.sample_rate, planned.steps, planned.epsilon, planned.delta, planned.accountant))
    assert raw["canaries"]["num_canaries"] == planned.canaries
    assert raw["audit"]["primary"]["kind"] in raw["canaries"]["kinds"]


def test_the_confirmation_set_preset_changes_seeds_only_and_they_are_preregistered(tmp_path):
    """presets/confirmation_set3.args: the default DP recipe at fresh preregistered seeds, its design unchanged."""
    from flows.pooled_audit import design_of
    from stages.params import validate_params

    lines = [ln for ln in (ROOT / "presets/confirmation_set3.args").read_text().splitlines()
             if ln.strip() and not ln.startswith("#")]
    assert all(" " not in ln for ln in lines)
    path = tmp_path / "params.yaml"
    shutil.copy(ROOT / "params.yaml", path)
    shutil.copy(ROOT / "studies.yaml", tmp_path / "studies.yaml")
    apply_overrides(path, lines)
    raw, base = read_params(path), read_params(ROOT / "params.yaml")
    validate_params(raw, str(path))
    assert design_of(raw, "dp_eps8") == design_of(base, "dp_eps8") and list(raw["runs"]) == ["dp_eps8"]
    seeds = {raw["canaries"]["seed"], raw["finetune"]["seed"], *(r["seed"] for r in raw["replicas"]["sets"].values())}
    assert len(seeds) == 3 and seeds <= set(base["audit"]["seeds"]["preregistered"])
    default = {base["canaries"]["seed"], *(r["seed"] for r in base["replicas"]["sets"].values())}
    assert not seeds & default  # disjoint from the default runs' set
