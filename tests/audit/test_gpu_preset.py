"""The GPU preset (presets/gpu_dp_audit.args) applies with DVC's own --set-param parser, yields a valid DP run, and
describes the same regime as the ceiling every report shows for it (audit.ceiling.planned.gpu_dp_audit)."""
import shutil

import pytest
from dvc.utils.hydra import apply_overrides

from stages.audit.params import AuditParams
from stages.core.params import load, read_params
from stages.finetune.params import load_finetune
from support import ROOT


def test_gpu_preset_matches_its_planned_ceiling(tmp_path):
    lines = [ln for ln in (ROOT / "presets/gpu_dp_audit.args").read_text().splitlines()
             if ln.strip() and not ln.startswith("#")]
    assert all(" " not in ln for ln in lines)  # the documented $(grep | sed) command splits on whitespace
    path = tmp_path / "params.yaml"
    shutil.copy(ROOT / "params.yaml", path)
    apply_overrides(path, lines)
    raw = read_params(path)
    ft = load_finetune("gpu_dp_audit", path, raw)
    planned = load(AuditParams, "audit", path, raw).ceiling.planned["gpu_dp_audit"]
    assert ft.dp.enabled and ft.device == "auto"
    assert (ft.sample_rate, ft.steps, ft.dp.epsilon, ft.dp.delta, ft.dp.accountant) == pytest.approx(
        (planned.sample_rate, planned.steps, planned.epsilon, planned.delta, planned.accountant))
    assert raw["canaries"]["num_canaries"] == planned.canaries
    assert raw["audit"]["primary"]["kind"] in raw["canaries"]["kinds"]
