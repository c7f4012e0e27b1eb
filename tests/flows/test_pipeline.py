"""The whole DAG for real on a tiny model through DVC: `dvc repro` (once per session: fixture reproduced_template),
the cache no-op, selective reruns after a params or code change, lineage, two training processes.

Each test reads the reproduced template or changes its own copy of it (fixture reproduced_project, DVC cache
included): every test runs alone or in any order. The Prefect flows, the sweep and the browser: test_pipeline_flows.py.
"""
import json
import re
import time

import pytest
import torch
import yaml
from testkit.project import ALL_STAGES, PYTHON, project_raw, ran, run

pytestmark = pytest.mark.slow


def test_dvc_repro_runs_every_stage_and_reports(reproduced_template):
    project, out = reproduced_template.path, reproduced_template.stdout  # the session's one `dvc repro`
    assert ran(out) == ALL_STAGES
    metrics = json.loads((project / "reports/metrics.json").read_text())
    for run_name in ("nondp", "dp"):
        r = metrics["runs"][run_name]
        for kind in ("new_token", "random"):
            m = r["attacks"]["loss"][kind]
            assert 0 <= m["tpr_at_fpr"]["0.01"]["value"] <= 1 and 0 <= m["auroc"] <= 1
        head = r["audit_primary"]
        assert ((head["attack"], head["kind"], head["m"], head["k_pos"], head["k_neg"])
                == ("loss", "new_token", 60, 5, 5))
        assert {"eps_lb_95", "eps_lb_99", "gdp_eps_lb_95", "gdp_eps_lb_99"} <= set(head)
        assert r["audit_exploratory"]["family_size"] == len(r["audit_exploratory"]["tests"]) > 1
    dp = metrics["runs"]["dp"]["audit_primary"]
    assert dp["accountant_epsilon"] == pytest.approx(8.0, rel=0.02) and dp["last_iterate_epsilon"] > 0
    assert dp["ideal_eps_lb_95_p10"] <= dp["ideal_eps_lb_95_median"] <= dp["ideal_eps_lb_95_p90"]
    assert "last_iterate_epsilon" not in metrics["runs"]["nondp"]["audit_primary"]
    assert metrics["runs"]["users"]["audit_primary"] is None  # no canaries
    # 2026's attacks beside 2023's: EZ-MIA and Min-K%++ on text rows and users; user inference's per-example score
    # recorded, its AUROC in the users' headline
    users = metrics["runs"]["users"]
    assert {"text", "users"} <= set(users["attacks"]["ez_mia"]) & set(users["attacks"]["min_k_pp"])
    assert users["user_score"] == "ref_ratio"
    assert metrics["planned"]["gpu_dp_audit"]["noise_multiplier"] > 0
    # the DP recipe's pooled test: dp and its replica, each canary in one run, one rule per run fixed in params
    pooled = metrics["pooled"]["dp"]
    assert pooled["runs"] == ["dp", "dp_r2"] and (pooled["m"], pooled["r"]) == (120, 20)
    assert pooled["v"] == sum(s["v"] for s in pooled["single_runs"]) and pooled["seed_status"] == "confirmation"
    assert pooled["seeds"] == sorted([project_raw()["canaries"]["seed"], 3105])
    assert pooled["eps_lb_95"] <= pooled["accountant_epsilon"]
    assert {"gdp_eps_lb_95", "curve_eps_lb_95", "ideal_eps_lb_95_median", "ideal_percentile"} <= set(pooled)
    assert metrics["runs"]["dp"]["audit_primary"]["seed_status"] == "confirmation"
    assert metrics["runs"]["dp"]["privacy"]["epsilon_spent"] == pytest.approx(8.0, rel=0.02)
    assert metrics["runs"]["nondp"]["privacy"]["epsilon_spent"] == "inf"
    html = (project / "reports/index.html").read_text()
    assert "data:image/png;base64," in html and "ε̂95" in html
    assert html.index('id="headline"') < html.index('<nav class="toc">') < html.index('id="summary"')
    assert "<details>" in html and (project / "reports/data_docs/index.html").is_file()
    headline = json.loads((project / "reports/headline.json").read_text())
    assert headline["users"]["user_inference_auroc"] == users["attacks"]["user_inference"]["users"]["auroc"]
    assert headline["dp"]["accountant_epsilon"] == pytest.approx(8.0, rel=0.02) and "audit_eps_lb_95" in headline["dp"]
    assert sorted(p.name for p in (project / "reports/plots_data/roc").iterdir())[0].endswith(".json")
    report = (project / "reports/report.md").read_text()
    assert "Pooled test of dp" in report and "parallel composition" in report
    # every reading that states a bound says at which confidence and delta
    readings = re.findall(r'<p class="reading">(.*?)</p>', html)
    assert len(readings) == 4
    for text in readings:
        if "ε ≥" in text or "ε̂ = 0" in text:
            assert re.search(r"at \d+% confidence \(δ = [0-9.e+-]+\)", text), text
    assert "Audit: the primary test (headline ε̂)" in report and "attainable ceiling" in report
    assert "gpu_dp_audit (planned, not run)" in report and "Bonferroni" in report
    assert "no multiple-testing correction" not in report
    # the DP engine's own audit (reports/selfcheck.json, git-tracked): its table, before any epsilon it vouches for
    assert report.index("## DP engine self-check") < report.index("## Audit: the primary test")
    assert "Every configuration passes" in report and "Not checked:" in report
    assert "noise and sampler RNG" in report and "seeded (finetune.seed)" in report
    # blind baselines on every non-randomised pool; canary users per substring length; randomised VMR control
    assert set(metrics["runs"]["nondp"]["blind"]) == {"text"} and "text" in metrics["runs"]["tofu"]["blind"]
    check = metrics["shift_check"]
    assert check["family_size"] == len(check["pools"]) >= 3  # one test per distinct pool:
    assert metrics["runs"]["nondp"]["blind"]["text"]["pool"] == metrics["runs"]["dp"]["blind"]["text"]["pool"]
    assert ["nondp", "dp"] in [p["runs"] for p in check["pools"]]  # nondp and dp score the same text rows
    assert all(set(p["verdicts"].values()) <= {"shift", "too_weak", "no_shift"} and p["power"]["trials"] > 0
               for p in check["pools"])
    assert set(metrics["runs"]["users"]["canary_users_by_length"]["user_inference"]) == {"1", "3"}
    assert metrics["runs"]["users"]["memorization"]["vmr"]["randomised"] is True
    assert metrics["runs"]["nondp"]["trainable"]["secret_token_rows"] > 0
    assert "Blind baselines" in report and "differ only in how the secret is chosen" in report
    lineage = json.loads((project / "reports/lineage.json").read_text())
    entry = lineage["runs.dp.audit_primary.eps_lb_95"]
    assert entry["lock_verified"] is True and entry["stage"] == "audit"
    assert "attack@dp" in entry["upstream"] and "finetune@dp" in entry["upstream"] and "base_model" in entry["upstream"]
    assert "attack@nondp" not in entry["upstream"]
    assert re.fullmatch(r"[0-9a-f]{40}", entry["git_commit"])
    assert entry["inputs"]["data/scores"].endswith(".dir")


def _numbers_and_keys(data, out=None) -> set:
    """Every number, numeric string and key of a JSON document."""
    out = set() if out is None else out
    if isinstance(data, dict):
        for k, v in data.items():
            out.add(str(k))
            _numbers_and_keys(v, out)
    elif isinstance(data, list):
        for v in data:
            _numbers_and_keys(v, out)
    elif isinstance(data, (int, float)) and not isinstance(data, bool):
        out.add(data)
    elif isinstance(data, str) and re.fullmatch(r"-?\d+(\.0+)?", data):
        out.add(float(data))
    return out


def test_a_dp_runs_published_outputs_hold_no_member_count(reproduced_template, tmp_path):
    """The member count of the DP run (its auditor-only record) is nowhere in metrics.json, run.json or the step
    log (the stage log: test_two_processes_train_like_one); `leakaudit release` writes the model alone (no
    membership file), loadable by transformers, its tokenizer the base model's own."""
    from transformers import AutoModelForCausalLM

    from stages.finetune.schema import read_auditor

    d = reproduced_template.path
    n = read_auditor(d / "data/models/dp").n_examples
    published = [d / "reports/metrics.json", d / "data/models/dp/run.json"]
    for f in published:
        found = _numbers_and_keys(json.loads(f.read_text()))
        assert n not in found and float(n) not in found and str(n) not in found, f
    assert all(json.loads(x) == {"step": k + 1}
               for k, x in enumerate((d / "data/models/dp/train_log.jsonl").read_text().splitlines()))
    out = tmp_path / "release"
    res = run([PYTHON, "-m", "leakaudit.cli", "--repo", str(d), "release", "--run", "dp", "--out", str(out)], d)
    assert "left out: manifest.parquet, auditor.json" in res.stdout
    names = {p.name for p in out.iterdir()}
    assert "manifest.parquet" not in names and "auditor.json" not in names and "run.json" not in names
    for f in ("release_manifest.json", "config.json", "generation_config.json"):
        if (out / f).is_file():
            found = _numbers_and_keys(json.loads((out / f).read_text()))
            assert n not in found and str(n) not in found, f
    base = d / "data/models/base"
    for f in out.glob("tokenizer*.json"):  # the base model's tokenizer, unchanged: nothing of the run in it
        assert json.loads(f.read_text()) == json.loads((base / f.name).read_text()), f.name
    lm = AutoModelForCausalLM.from_pretrained(out)
    assert lm.get_input_embeddings().num_embeddings == json.loads((out / "config.json").read_text())["vocab_size"]


def test_two_processes_train_like_one(reproduced_project):
    """finetune.distributed: the stage relaunches itself under torchrun (2 gloo processes on CPU). Both ranks
    draw the same Poisson batches and split them; rank 0 alone adds the noise, from the same generator as the
    single process: same accountant epsilon, same batches, the same weights up to float summation order."""
    project = reproduced_project
    from safetensors.torch import load_file

    params = yaml.safe_load((project / "params.yaml").read_text())
    params["finetune"]["out_dir"] = "data/models_2proc"
    params["runs"]["dp"]["distributed"] = {"nproc_per_node": 2}
    alt = project / "params_2proc.yaml"
    alt.write_text(yaml.safe_dump(params, sort_keys=False))
    res = run([PYTHON, "-m", "stages.finetune", "--run", "dp", "--params", alt.name], project)
    one, two = (project / "data/models/dp", project / "data/models_2proc/dp")
    from stages.finetune.schema import read_auditor

    n = read_auditor(two).n_examples  # the stage log names public quantities only, never the member count
    stage_log = [ln for ln in (res.stdout + res.stderr).splitlines() if "run dp:" in ln]
    assert stage_log and not any(re.search(rf"\b{n}\b", ln) for ln in stage_log), stage_log
    r1, r2 = (json.loads((d / "run.json").read_text()) for d in (one, two))
    assert (r1["world_size"], r2["world_size"]) == (1, 2) and r2["privacy"]["world_size"] == 2
    for key in ("epsilon_spent", "noise_multiplier", "sample_rate", "accounted_steps"):
        assert r2["privacy"][key] == r1["privacy"][key], key
    logs = [[json.loads(x) for x in (d / "train_log.jsonl").read_text().splitlines()] for d in (one, two)]
    # a DP run publishes no per-step batch size, token count, loss or time, and no final loss (loop.dp_record)
    assert logs[0] == logs[1] == [{"step": k + 1} for k in range(r1["steps"])]
    assert r1["final_loss"] is None and r2["final_loss"] is None
    assert r1["privacy"]["secure_rng"] is False
    assert r2["valid"]["nll"] == pytest.approx(r1["valid"]["nll"], rel=1e-4)
    w1, w2 = (load_file(str(d / "trainable.safetensors")) for d in (one, two))
    assert w1.keys() == w2.keys()
    rows = w2["new_embed.weight"]  # initialised as identical rows (the vocabulary mean): training moved them
    assert (rows - rows[:1]).abs().max() > 0
    for k in w1:
        torch.testing.assert_close(w2[k], w1[k], rtol=1e-4, atol=1e-5, msg=k)


def test_second_repro_is_a_noop(reproduced_project):
    project = reproduced_project
    t = time.time()
    out = run(["dvc", "repro"], project).stdout
    elapsed = time.time() - t
    assert ran(out) == set() and "up to date" in out
    print(f"no-op dvc repro: {elapsed:.2f} s")


def _lineage(project, target, *flags, check=True):
    return run([PYTHON, "-m", "leakaudit.cli", "lineage", f"reports/metrics.json:{target}", *flags], project,
               check=check)


def test_lineage_traces_reported_numbers_back_to_raw_files(reproduced_project):
    project = reproduced_project
    from stages.shared.core.formatting import flatten

    lock = yaml.safe_load((project / "dvc.lock").read_text())["stages"]
    raw_md5 = {d["path"]: d["md5"] for d in lock["preprocess@personachat"]["deps"] if d["path"].startswith("data/raw")}
    metrics = json.loads((project / "reports/metrics.json").read_text())
    for target, run_name, raw_dataset in [("runs.dp.privacy.epsilon_spent", "dp", "personachat"),
                                          ("runs.nondp.audit_primary.eps_lb_95", "nondp", "personachat"),
                                          ("runs.users.attacks.user_inference.users.auroc", "users", "enron_users")]:
        t = json.loads(_lineage(project, target, "--json").stdout)
        names = [s["stage"] for s in t["chain"]]
        assert t["stage"] == names[0] == "audit" and t["checked"] is True
        assert {f"attack@{run_name}", f"finetune@{run_name}", "base_model"} <= set(names)
        assert not {s for s in names if s.startswith(("attack@", "finetune@")) and not s.endswith("@" + run_name)}
        assert t["value"] == flatten(metrics, numbers_only=True)[target]
        raw = {r["path"]: r["md5"] for r in t["raw"]}
        mine = {p: m for p, m in raw.items() if p in {d["path"] for d in lock[f"preprocess@{raw_dataset}"]["deps"]}}
        assert mine and all(re.fullmatch(r"[0-9a-f]{32}(\.dir)?", m) for m in mine.values())
        if raw_dataset == "personachat":
            assert mine == raw_md5  # the md5 dvc.lock recorded for the raw file
        assert re.fullmatch(r"[0-9a-f]{40}", t["git"]["commit"])
        read = set(t["chain"][0]["params"])  # the params the audit read, as dvc.lock has them
        assert "runs" in read and {"audit.primary", "audit.exploratory"} <= read and "study" not in read
    text = _lineage(project, "runs.dp.privacy.epsilon_spent").stdout
    assert "written by stage 'audit'" in text and "raw data at the root of the chain" in text
    assert "no code, params or data dep of the chain changed since dvc.lock" in text
    assert "not in this workspace" not in text


def test_lineage_refuses_on_a_stale_workspace_and_suggests_near_paths(reproduced_project):
    project = reproduced_project
    bad = _lineage(project, "runs.dp.privacy.epsilon_spnt", check=False)
    assert bad.returncode == 2 and "near matches: runs.dp.privacy.epsilon_spent" in bad.stderr
    raw = project / "data/raw/personachat/valid_self_original_no_cands.txt"
    original = raw.read_bytes()
    raw.write_bytes(original + b"1 your persona: i edited this file without dvc repro.\n")
    try:
        res = _lineage(project, "runs.dp.privacy.epsilon_spent", check=False)
        assert res.returncode == 2 and res.stdout == ""
        (line,) = res.stderr.strip().splitlines()
        assert line.startswith("error: workspace no longer matches dvc.lock") and "preprocess@personachat" in line
        assert "run `dvc repro`" in line
    finally:
        raw.write_bytes(original)
    assert _lineage(project, "runs.dp.privacy.epsilon_spent", check=False).returncode == 0


def test_changing_the_primary_test_reruns_only_audit_and_report(reproduced_project):
    project = reproduced_project
    p = yaml.safe_load((project / "params.yaml").read_text())
    p["audit"]["primary"].update(attack="ref_ratio", kind="random", k_pos=7)
    (project / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
    out = run(["dvc", "repro"], project).stdout
    assert ran(out) == {"audit", "report"}
    metrics = json.loads((project / "reports/metrics.json").read_text())
    head = metrics["runs"]["nondp"]["audit_primary"]
    assert (head["attack"], head["kind"], head["k_pos"]) == ("ref_ratio", "random", 7)
    assert "`ref_ratio` score on `random` canaries" in (project / "reports/report.md").read_text()


def test_report_follows_the_configured_fprs_and_confidences(reproduced_project):
    project = reproduced_project
    # 0.01 removed from audit.fprs and other confidences: the report shows what was computed instead of crashing
    path = project / "params.yaml"
    p = yaml.safe_load(path.read_text())
    p["audit"]["fprs"] = [0.05, 0.1]
    p["audit"]["primary"]["confidences"] = [0.9]
    path.write_text(yaml.safe_dump(p, sort_keys=False))
    assert ran(run(["dvc", "repro"], project).stdout) == {"audit", "report"}
    report = (project / "reports/report.md").read_text().split("## Sweeps")[0]  # (sweeps: as committed)
    # (the design study's rows are committed, each at 95% by its own definition)
    report = re.sub(r"## Audit design study.*?(?=\n## )", "", report, flags=re.S)
    # (so are the DP engine self-check's: its 95% and 1 - alpha/K columns are its own design, params `selfcheck`)
    report = re.sub(r"## DP engine self-check.*?(?=\n## )", "", report, flags=re.S)
    # (and the user-level plan's and its comparison's: their confidence is their own design, studies.yaml `user_level`)
    report = re.sub(r"## Users: the user-level comparison's plan.*?(?=\n## |\Z)", "", report, flags=re.S)
    report = re.sub(r"## Users: the same ε, three mechanisms.*?(?=\n## |\Z)", "", report, flags=re.S)
    assert "TPR@5%FPR [95% CI]" in report and "ε̂90 assumption-free (Steinke)" in report and "ε̂95" not in report


def test_secrets_param_change_reruns_secrets_not_preprocess(reproduced_project):
    """A secrets param: the secrets stage reruns, and what reads its output goes stale (``dvc status`` after
    reproducing that stage alone: DVC's own verdict on what a `dvc repro` would rerun, without rerunning it)."""
    project = reproduced_project
    p = yaml.safe_load((project / "params.yaml").read_text())
    p["secrets"]["datasets"]["enron"]["prompt_fraction"] = 0.5
    (project / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
    assert set(json.loads(run(["dvc", "status", "--json"], project).stdout)) == {"secrets@enron"}
    assert ran(run(["dvc", "repro", "--single-item", "secrets@enron"], project).stdout) == {"secrets@enron"}
    stale = set(json.loads(run(["dvc", "status", "--json"], project).stdout))
    # what reads these secrets: the run on enron_users (runs.users.secrets: enron; its randomised VMR/AIR control
    # draws from them) and its attack, and the report (the base model's secret check); never the runs on other
    # datasets (each depends on its own secrets file), preprocessing or the canaries
    readers = {"finetune@users", "attack@users"}
    assert readers | {"report"} <= stale <= readers | {"audit", "report"}


def test_a_code_change_reruns_the_stages_that_import_it(reproduced_project):
    project = reproduced_project
    # audit code: the audit reruns (not the variance analysis: it reads the bounds from the shared
    # stages.shared.bounds),
    # its outputs come out the same, so the report is not rerun; a shared module: `dvc status` calls every importing
    # stage stale
    roc = project / "stages/audit/roc.py"
    roc.write_text(roc.read_text() + "\n# touched\n")
    assert ran(run(["dvc", "repro"], project).stdout) == {"audit"}
    io = project / "stages/shared/core/io.py"
    original = io.read_text()
    io.write_text(original + "\n# touched\n")
    try:
        status = run(["dvc", "status", "--json"], project).stdout
        assert set(json.loads(status)) == ALL_STAGES
    finally:
        io.write_text(original)
    assert "up to date" in run(["dvc", "status"], project).stdout
