"""The whole DAG for real on a tiny model: `dvc repro`, cache no-op, selective rerun, Prefect flow.

Tests in this module share one reproduced project and run in file order.
"""
import json
import os
import re
import shutil
import time

import pytest
import torch
import yaml

from support import PYTHON, run

pytestmark = pytest.mark.slow

ALL_STAGES = {"base_model", "preprocess@personachat", "preprocess@tofu", "preprocess@enron", "preprocess@enron_users",
              "secrets@enron", "secrets@tofu", "canaries", "audit", "report"} | {
    f"{stage}@{run}" for stage in ("finetune", "attack") for run in ("nondp", "dp", "users", "tofu")}


def ran(stdout: str) -> set[str]:
    return set(re.findall(r"Running stage '([^']+)'", stdout))


def test_dvc_repro_runs_every_stage_and_reports(tiny_project):
    out = run(["dvc", "repro"], tiny_project).stdout
    assert ran(out) == ALL_STAGES
    metrics = json.loads((tiny_project / "reports/metrics.json").read_text())
    for run_name in ("nondp", "dp"):
        r = metrics["runs"][run_name]
        for kind in ("new_token", "random"):
            m = r["attacks"]["loss"][kind]
            assert 0 <= m["tpr_at_fpr"]["0.01"]["value"] <= 1 and 0 <= m["auroc"] <= 1
        head = r["audit_primary"]
        assert (head["attack"], head["kind"], head["m"], head["k_pos"], head["k_neg"]) == ("loss", "new_token", 60, 5, 5)
        assert {"eps_lb_95", "eps_lb_99", "gdp_eps_lb_95", "gdp_eps_lb_99"} <= set(head)
        assert r["audit_exploratory"]["family_size"] == len(r["audit_exploratory"]["tests"]) > 1
    dp = metrics["runs"]["dp"]["audit_primary"]
    assert dp["accountant_epsilon"] == pytest.approx(8.0, rel=0.02) and dp["last_iterate_epsilon"] > 0
    assert dp["ideal_eps_lb_95_p10"] <= dp["ideal_eps_lb_95_median"] <= dp["ideal_eps_lb_95_p90"]
    assert "last_iterate_epsilon" not in metrics["runs"]["nondp"]["audit_primary"]
    assert metrics["runs"]["users"]["audit_primary"] is None  # no canaries
    assert metrics["planned"]["gpu_dp_audit"]["noise_multiplier"] > 0
    assert metrics["runs"]["dp"]["privacy"]["epsilon_spent"] == pytest.approx(8.0, rel=0.02)
    assert metrics["runs"]["nondp"]["privacy"]["epsilon_spent"] == "inf"
    html = (tiny_project / "reports/index.html").read_text()
    assert "data:image/png;base64," in html and "ε̂95" in html
    report = (tiny_project / "reports/report.md").read_text()
    assert "Audit: the pre-registered test (headline ε̂)" in report and "attainable ceiling" in report
    assert "gpu_dp_audit (planned, not run)" in report and "Bonferroni" in report
    assert "no multiple-testing correction" not in report
    # blind baselines on every non-randomised pool; canary users per substring length; randomised VMR control
    assert set(metrics["runs"]["nondp"]["blind"]) == {"text"} and "text" in metrics["runs"]["tofu"]["blind"]
    assert metrics["shift_check"]["family_size"] >= 3
    assert set(metrics["runs"]["users"]["canary_users_by_length"]["user_inference"]) == {"1", "3"}
    assert metrics["runs"]["users"]["memorization"]["vmr"]["randomised"] is True
    assert metrics["runs"]["nondp"]["trainable"]["secret_token_rows"] > 0
    assert "Blind baselines" in report and "differ only in how the secret is chosen" in report
    lineage = json.loads((tiny_project / "reports/lineage.json").read_text())
    entry = lineage["runs.dp.audit_primary.eps_lb_95"]
    assert entry["lock_verified"] is True and entry["stage"] == "audit"
    assert "attack@dp" in entry["upstream"] and "finetune@dp" in entry["upstream"] and "base_model" in entry["upstream"]
    assert "attack@nondp" not in entry["upstream"]
    assert re.fullmatch(r"[0-9a-f]{40}", entry["git_commit"])
    assert entry["inputs"]["data/scores"].endswith(".dir")


def test_two_processes_train_like_one(tiny_project):
    """finetune.distributed: the stage relaunches itself under torchrun (2 gloo processes on CPU). Both ranks
    draw the same Poisson batches and split them; rank 0 alone adds the noise, from the same generator as the
    single process: same accountant epsilon, same batches, the same weights up to float summation order."""
    from safetensors.torch import load_file

    params = yaml.safe_load((tiny_project / "params.yaml").read_text())
    params["finetune"]["out_dir"] = "data/models_2proc"
    params["runs"]["dp"]["distributed"] = {"nproc_per_node": 2}
    alt = tiny_project / "params_2proc.yaml"
    alt.write_text(yaml.safe_dump(params, sort_keys=False))
    try:
        run([PYTHON, "-m", "stages.finetune", "--run", "dp", "--params", alt.name], tiny_project)
        one, two = (tiny_project / "data/models/dp", tiny_project / "data/models_2proc/dp")
        r1, r2 = (json.loads((d / "run.json").read_text()) for d in (one, two))
        assert (r1["world_size"], r2["world_size"]) == (1, 2) and r2["privacy"]["world_size"] == 2
        for key in ("epsilon_spent", "noise_multiplier", "sample_rate", "accounted_steps"):
            assert r2["privacy"][key] == r1["privacy"][key], key
        logs = [[json.loads(x) for x in (d / "train_log.jsonl").read_text().splitlines()] for d in (one, two)]
        assert [r["batch"] for r in logs[0]] == [r["batch"] for r in logs[1]]
        assert [r["loss"] for r in logs[1]] == pytest.approx([r["loss"] for r in logs[0]], rel=1e-4)
        assert r2["valid"]["nll"] == pytest.approx(r1["valid"]["nll"], rel=1e-4)
        w1, w2 = (load_file(str(d / "trainable.safetensors")) for d in (one, two))
        assert w1.keys() == w2.keys()
        rows = w2["new_embed.weight"]  # initialised as identical rows (the vocabulary mean): training moved them
        assert (rows - rows[:1]).abs().max() > 0
        for k in w1:
            torch.testing.assert_close(w2[k], w1[k], rtol=1e-4, atol=1e-5, msg=k)
    finally:
        alt.unlink()
        shutil.rmtree(tiny_project / "data/models_2proc", ignore_errors=True)


def test_second_repro_is_a_noop(tiny_project):
    t = time.time()
    out = run(["dvc", "repro"], tiny_project).stdout
    elapsed = time.time() - t
    assert ran(out) == set() and "up to date" in out
    print(f"no-op dvc repro: {elapsed:.2f} s")


def test_changing_the_primary_test_reruns_only_audit_and_report(tiny_project):
    p = yaml.safe_load((tiny_project / "params.yaml").read_text())
    p["audit"]["primary"].update(attack="ref_ratio", kind="random", k_pos=7)
    (tiny_project / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
    out = run(["dvc", "repro"], tiny_project).stdout
    assert ran(out) == {"audit", "report"}
    metrics = json.loads((tiny_project / "reports/metrics.json").read_text())
    head = metrics["runs"]["nondp"]["audit_primary"]
    assert (head["attack"], head["kind"], head["k_pos"]) == ("ref_ratio", "random", 7)
    assert "`ref_ratio` score on `random` canaries" in (tiny_project / "reports/report.md").read_text()


def test_report_follows_the_configured_fprs_and_confidences(tiny_project):
    # 0.01 removed from audit.fprs and other confidences: the report shows what was computed instead of crashing
    path = tiny_project / "params.yaml"
    before = path.read_text()
    p = yaml.safe_load(before)
    p["audit"]["fprs"] = [0.05, 0.1]
    p["audit"]["primary"]["confidences"] = [0.9]
    path.write_text(yaml.safe_dump(p, sort_keys=False))
    try:
        assert ran(run(["dvc", "repro"], tiny_project).stdout) == {"audit", "report"}
        report = (tiny_project / "reports/report.md").read_text().split("## Sweeps")[0]  # (sweeps: as committed)
        assert "TPR@5%FPR [95% CI]" in report and "ε̂90 assumption-free (Steinke)" in report and "ε̂95" not in report
    finally:
        path.write_text(before)
    run(["dvc", "repro"], tiny_project)


def test_secrets_param_change_reruns_secrets_not_preprocess(tiny_project):
    p = yaml.safe_load((tiny_project / "params.yaml").read_text())
    p["secrets"]["datasets"]["enron"]["prompt_fraction"] = 0.5
    (tiny_project / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
    out = run(["dvc", "repro"], tiny_project).stdout
    done = ran(out)
    # secrets and what reads them (the fine-tunes, whose randomised VMR/AIR control draws from them; the attacks;
    # then audit and report), never preprocessing or the canaries
    assert "secrets@enron" in done and "secrets@tofu" not in done and "finetune@users" in done
    assert not {s for s in done if s.split("@")[0] in ("preprocess", "canaries", "base_model")}
    assert done <= {"secrets@enron", "audit", "report"} | {s for s in ALL_STAGES if s.split("@")[0] in
                                                         ("attack", "finetune")}
    report = (tiny_project / "reports/report.md").read_text()
    assert "Real secrets in the training data" in report and "Data contracts (Great Expectations)" in report


def test_a_code_change_reruns_the_stages_that_import_it(tiny_project):
    # audit code: audit reruns (its outputs come out the same, so the report is not rerun); a shared
    # module: `dvc status` calls every importing stage stale
    roc = tiny_project / "stages/audit/roc.py"
    roc.write_text(roc.read_text() + "\n# touched\n")
    assert ran(run(["dvc", "repro"], tiny_project).stdout) == {"audit"}
    io = tiny_project / "stages/core/io.py"
    original = io.read_text()
    io.write_text(original + "\n# touched\n")
    try:
        status = run(["dvc", "status", "--json"], tiny_project).stdout
        assert set(json.loads(status)) == ALL_STAGES
    finally:
        io.write_text(original)
    assert "up to date" in run(["dvc", "status"], tiny_project).stdout


QUERY = """
import asyncio, json
from prefect.client.orchestration import get_client
async def main():
    async with get_client() as c:
        runs = await c.read_flow_runs()
        arts = await c.read_artifacts()
        print(json.dumps({"runs": [{"id": str(r.id), "state": r.state_type.value} for r in runs],
                          "artifacts": [{"key": a.key, "flow_run_id": str(a.flow_run_id)} for a in arts]}))
asyncio.run(main())
"""


def test_prefect_flow_runs_the_dag_through_dvc(tiny_project, tmp_path):
    # only the report title changes: DVC reruns just `report`, every stage still gets its task + artifact
    p = yaml.safe_load((tiny_project / "params.yaml").read_text())
    p["report"]["title"] = "flow run"
    (tiny_project / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
    env = {"PREFECT_HOME": str(tmp_path / "prefect"), "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120"}
    os.environ.update(env)
    try:
        out = run([PYTHON, "-m", "flows.pipeline"], tiny_project)
        q = json.loads(run([PYTHON, "-c", QUERY], tiny_project).stdout.strip().splitlines()[-1])
    finally:
        for k in env:
            os.environ.pop(k, None)
    assert len(q["runs"]) == 1 and q["runs"][0]["state"] == "COMPLETED", out.stdout[-2000:]
    keys = {a["key"] for a in q["artifacts"] if a["flow_run_id"] == q["runs"][0]["id"]}
    expected = {"dvc-lock-" + re.sub(r"[^a-z0-9-]+", "-", s.lower()) for s in ALL_STAGES}
    assert expected <= keys and "pipeline-stages" in keys
    assert "flow run" in (tiny_project / "reports/report.md").read_text()


def test_sweep_flow_runs_dvc_experiments_and_tabulates_kinds(tiny_project, tmp_path):
    # one sweep point that changes only audit params: the experiment reruns audit and report, the rest is cached.
    # As a user would: the reproduced state (dvc.lock, metrics) is committed before experimenting.
    run(["git", "add", "-A"], tiny_project)
    run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "reproduced"], tiny_project)
    env = {"PREFECT_HOME": str(tmp_path / "prefect"), "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120"}
    os.environ.update(env)
    try:
        run([PYTHON, "-m", "flows.sweep", "--name", "kpos", "--set", "audit.primary.k_pos=5", "--key",
             "audit_primary.k_pos"],
            tiny_project)
    finally:
        for k in env:
            os.environ.pop(k, None)
    res = json.loads((tiny_project / "reports/sweeps/kpos.json").read_text())
    assert res["points"] == {"kpos-0": ["audit.primary.k_pos=5"]}
    assert res["baseline"] == run(["git", "rev-parse", "HEAD"], tiny_project).stdout.strip()
    (row,) = res["rows"]
    assert row["experiment"] == "kpos-0" and re.fullmatch(r"[0-9a-f]{40}", row["rev"])
    assert row["metrics"]["runs.nondp.audit_primary.k_pos"] == 5
    md = (tiny_project / "reports/sweeps/kpos.md").read_text()
    # the canary table: one line per run and kind, with bootstrap intervals
    kind_lines = [ln for ln in md.splitlines() if ln.startswith("| kpos-0 | audit.primary.k_pos=5 |")]
    assert {tuple(c.strip() for c in ln.split("|")[3:5]) for ln in kind_lines} == {
        (r, k) for r in ("nondp", "dp") for k in ("new_token", "random", "unigram", "bigram", "model_based")}
    assert all(re.search(r"\d\.\d{3} \[\d\.\d{3}, \d\.\d{3}\]", ln) for ln in kind_lines)
    assert "kpos-0" in run(["dvc", "exp", "list", "--all-commits"], tiny_project).stdout
    # the sweep's tables reach the report through `dvc repro` (reports/sweeps is a dependency of `report`)
    assert ran(run(["dvc", "repro"], tiny_project).stdout) == {"report"}
    assert "Sweeps (DVC experiments)" in (tiny_project / "reports/report.md").read_text()
