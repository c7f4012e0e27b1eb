"""Smoke tests of the scripts under benchmarks/ (tiny model or tiny design, a step or two), so that a figure the
docs cite can always be reproduced by the command next to it."""
import json

import pytest
from testkit.project import PYTHON, ROOT, run

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


def test_metrics_leaves_names_what_differs(tmp_path):
    """benchmarks/metrics_leaves.py on two small metrics files."""
    before, after = tmp_path / "before.json", tmp_path / "after.json"
    before.write_text(json.dumps({"runs": {"dp": {"eps": 1.0, "old": 2}}, "v": [1, 2]}))
    after.write_text(json.dumps({"runs": {"dp": {"eps": 1.5, "new": 3}}, "v": [1, 2]}))
    out = run([PYTHON, str(ROOT / "benchmarks/metrics_leaves.py"), str(before), str(after)], tmp_path).stdout
    assert "leaves: 4 before, 4 after; 3 common, 2 equal" in out
    assert "only before: ['/runs/dp/old']" in out and "only after: ['/runs/dp/new']" in out
    assert "differs /runs/dp/eps: 1.0 -> 1.5" in out


def test_adam_canary_sim_matches_the_linear_model_under_dp_sgd():
    """benchmarks/adam_canary_sim.py at one (q, T), one seed: DP-SGD's final row is the last-iterate model's."""
    import ast

    out = run([PYTHON, str(ROOT / "benchmarks/adam_canary_sim.py"), "--seeds", "1", "--profiles", "0.46:5"],
              ROOT).stdout
    rows = {line.split()[2]: ast.literal_eval(line.split(": ", 1)[1]) for line in out.splitlines()}
    assert set(rows) == {"adam", "sgd"}
    assert rows["sgd"]["final model"] == rows["sgd"]["linear model"]
    assert rows["adam"]["final model"][0] < rows["adam"]["linear model"][0]  # momentum weakens late inclusions


def test_scoring_benchmark_runs_on_the_tiny_pipeline(reproduced_template):
    """benchmarks/scoring.py on the tiny pipeline's base model, canaries and data, a few loop examples."""
    out = run([PYTHON, str(ROOT / "benchmarks/scoring.py"), "--loop-examples", "4", "--text-rows", "8"],
              reproduced_template.path).stdout
    assert "ours / bare =" in out and "ours / loop =" in out
    err = float(out.split("max |ours - loop| log-prob difference:")[1].split()[0])
    assert err < 1e-4  # the bucketed scorer computes the loop's log-probabilities


def test_kernel_hashes_compares_two_cpu_kernel_paths(reproduced_template, tmp_path):
    """benchmarks/kernel_hashes.py on the tiny pipeline (one secrets dataset): the structural files agree."""
    import yaml

    d = reproduced_template.path
    p = yaml.safe_load((d / "params.yaml").read_text())
    p["secrets"]["datasets"] = {"tofu": p["secrets"]["datasets"]["tofu"]}
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(p, sort_keys=False))
    out = run([PYTHON, str(ROOT / "benchmarks/kernel_hashes.py"), "--params", str(params), "--out",
               str(tmp_path / "out"), "--project", str(d)], d).stdout
    lines = {line.split()[0]: line.split()[-1] for line in out.splitlines()}
    structural = {f: v for f, v in lines.items()
                  if f.split("/")[0] in ("secrets", "canaries") and f.endswith(".parquet")}
    assert "secrets/tofu.parquet" in structural and "canaries/new_token.parquet" in structural
    assert set(structural.values()) == {"same"}, structural  # which secrets, which canaries, who is a member
    assert not any((d / "data/secrets").glob("*.tmp*"))  # the project's own outputs untouched


def test_repro_time_times_a_stage_at_a_commit(reproduced_project):
    """benchmarks/repro_time.py with one commit and one stage, in a reproduced tiny project."""
    res = run([PYTHON, str(ROOT / "benchmarks/repro_time.py"), "HEAD", "--stages", "finetune", "--only",
               "finetune@nondp"], reproduced_project)
    doc = json.loads(res.stdout)
    (seconds,) = doc["seconds"].values()
    assert list(seconds) == ["finetune@nondp"] and seconds["finetune@nondp"] > 0


def test_device_check_runs_with_the_cpu_as_the_device(tmp_path):
    """benchmarks/device_check.py --cpu: the device check's code path with the CPU in the device's place (the
    figures in docs/results.md come from an H200); on one device the three modes give one clipped update."""
    import pytest

    run([PYTHON, str(ROOT / "benchmarks/device_check.py"), "--cpu", "--out", str(tmp_path)], ROOT)
    doc = json.loads((tmp_path / "device_check.json").read_text())
    rows = doc["one_step_noise_off"]
    assert len(rows) == 4 and all(r["update_norm"] > 0 for r in rows)
    assert all(r[k] < 1e-5 for r in rows for k in ("device_hooks_vs_cpu_hooks", "device_ghost_vs_device_hooks",
                                                    "device_bk_vs_device_hooks"))
    for mode in ("hooks", "ghost", "bk"):
        assert doc[f"train_{mode}"]["finite"] and doc[f"train_{mode}"]["epsilon_spent"] == pytest.approx(8.0, rel=0.01)
    assert doc["scoring_fp32_max_abs_diff_device_vs_cpu"] < 1e-6


def test_study_power_under_the_ideal_runs_on_the_committed_study():
    """benchmarks/study_power.py with few trials: every configuration of variance.study, its ideal median ordered
    by q at equal compute (A > B > C; D, B's q and T, at B's), one power per (seeds, level)."""
    out = run([PYTHON, str(ROOT / "benchmarks/study_power.py"), "--trials", "60", "--seeds", "4", "--levels",
               "0.05"], ROOT).stdout
    doc = json.loads(out[out.index("{\n"):])
    med = {c: r["ideal_eps_lb_95_median"] for c, r in doc["configs"].items()}
    assert set(med) == {"A", "B", "C", "D"} and med["A"] > med["B"] > med["C"] and med["D"] == med["B"]
    (power,) = doc["power"].values()
    assert 0 <= power <= 1


def test_sharding_memory_counts_each_configuration_on_a_tiny_model(tiny_base, tmp_path):
    """benchmarks/sharding_memory.py on the tiny Llama: one process, DDP and FSDP at 2 processes, 2 steps each."""
    out = tmp_path / "memory.json"
    res = run([PYTHON, str(ROOT / "benchmarks/sharding_memory.py"), "--model", str(tiny_base), "--steps", "2",
               "--examples", "4", "--seq", "16", "--chunk", "2", "--out", str(out)], ROOT)
    one, ddp, fsdp = json.loads(out.read_text())
    assert (one["config"], ddp["config"], fsdp["config"]) == ("one process", "DDP", "FSDP")
    assert ddp["total_mb"] == pytest.approx(one["total_mb"])  # every DDP process a whole replica
    assert fsdp["total_mb"] < 0.75 * one["total_mb"] and fsdp["optimizer"] == pytest.approx(one["optimizer"] / 2)
    assert "FSDP / one process, per process:" in res.stdout


def test_sharding_memory_model_prints_the_modelled_models():
    """benchmarks/sharding_memory.py --memory-model: the per-GPU model docs/results.md cites."""
    out = run([PYTHON, str(ROOT / "benchmarks/sharding_memory.py"), "--memory-model"], ROOT).stdout
    assert "| SmolLM2-135M | 0.135 B | 0.106 B | 2.2 GB | 1.2 / 0.6 / 0.3 GB |" in out
    assert "| Llama-3.1-8B | 8.03 B | 6.98 B | 143.8 GB | 73.6 / 37.7 / 19.7 GB |" in out


def test_prv_domain_compares_the_domains_on_a_small_grid():
    """benchmarks/prv_domain.py on two configurations: the domains are opacus' own, the ratio printed."""
    out = run([PYTHON, str(ROOT / "benchmarks/prv_domain.py"), "--q", "0.23", "--sigma", "0.8", "--steps", "1", "10",
               "--delta-error", "1e-8"], ROOT).stdout
    assert "domains identical: 2 of 2" in out and "ours / opacus =" in out
