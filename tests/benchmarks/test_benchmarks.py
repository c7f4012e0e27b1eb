"""Smoke tests of the scripts under benchmarks/ (tiny model or tiny design, a step or two), so that a figure the
docs cite can always be reproduced by the command next to it."""
import json

import pytest

from support import PYTHON, ROOT, run

pytestmark = pytest.mark.slow


def test_dp_overhead_times_its_own_steps_in_every_mode(reproduced_template, tmp_path):
    """benchmarks/dp_overhead.py on the tiny pipeline's base model and data: one timed LoRA step per mode (a DP
    run's step log holds step indices only, so the script times and counts the steps itself)."""
    out = tmp_path / "dp.json"
    res = run([PYTHON, str(ROOT / "benchmarks/dp_overhead.py"), "--steps", "1", "--only", "lora", "--nproc", "1",
               "--json", str(out)], reproduced_template.path)
    rows = json.loads(out.read_text())
    assert [r["mode"] for r in rows] == ["non-DP", "ghost", "bk", "hooks"]
    assert all(r["step_s"] > 0 and r["tokens_per_s"] > 0 and r["peak_mb"] > 0 for r in rows)
    assert "| lora | bk |" in res.stdout


def test_selfcheck_mutants_flags_a_mutant_and_writes_its_row(tmp_path):
    """benchmarks/selfcheck_mutants.py, one seed of one setup (noise x 0.9 on the transformer probe)."""
    out = tmp_path / "mutants.json"
    run([PYTHON, str(ROOT / "benchmarks/selfcheck_mutants.py"), "--seeds", "1", "--only", "2", "--out", str(out)],
        ROOT)
    doc = json.loads(out.read_text())
    (row,) = doc["rows"]
    assert row["mutant"] == "noise_x0.9" and row["flagged"] == 1 and row["named"] == {"noise scale": 1}
