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
              "secrets@enron", "secrets@tofu", "canaries", "audit", "variance", "report"} | {
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
    assert html.index('id="headline"') < html.index('<nav class="toc">') < html.index('id="summary"')
    assert "<details>" in html and (tiny_project / "reports/data_docs/index.html").is_file()
    headline = json.loads((tiny_project / "reports/headline.json").read_text())
    assert headline["dp"]["accountant_epsilon"] == pytest.approx(8.0, rel=0.02) and "audit_eps_lb_95" in headline["dp"]
    assert sorted(p.name for p in (tiny_project / "reports/plots_data/roc").iterdir())[0].endswith(".json")
    report = (tiny_project / "reports/report.md").read_text()
    assert "Audit: the pre-registered test (headline ε̂)" in report and "attainable ceiling" in report
    assert "gpu_dp_audit (planned, not run)" in report and "Bonferroni" in report
    assert "no multiple-testing correction" not in report
    # the DP engine's own audit (reports/selfcheck.json, git-tracked): its table, before any epsilon it vouches for
    assert report.index("## DP engine self-check") < report.index("## Audit: the pre-registered test")
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
        # a DP run publishes no per-step batch size, token count, loss or time, and no final loss (loop.dp_record)
        assert logs[0] == logs[1] == [{"step": k + 1} for k in range(r1["steps"])]
        assert r1["final_loss"] is None and r2["final_loss"] is None
        assert r1["privacy"]["rng"].startswith("seeded")
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


def _lineage(project, target, *flags, check=True):
    return run([PYTHON, "-m", "flows.cli", "lineage", f"reports/metrics.json:{target}", *flags], project, check=check)


def test_lineage_traces_reported_numbers_back_to_raw_files(tiny_project):
    from stages.report.render import flatten

    lock = yaml.safe_load((tiny_project / "dvc.lock").read_text())["stages"]
    raw_md5 = {d["path"]: d["md5"] for d in lock["preprocess@personachat"]["deps"] if d["path"].startswith("data/raw")}
    metrics = json.loads((tiny_project / "reports/metrics.json").read_text())
    for target, run_name, raw_dataset in [("runs.dp.privacy.epsilon_spent", "dp", "personachat"),
                                          ("runs.nondp.audit_primary.eps_lb_95", "nondp", "personachat"),
                                          ("runs.users.attacks.user_inference.users.auroc", "users", "enron_users")]:
        t = json.loads(_lineage(tiny_project, target, "--json").stdout)
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
        assert "runs" in read and {"audit.primary", "audit.exploratory"} <= read and "audit.study" not in read
    text = _lineage(tiny_project, "runs.dp.privacy.epsilon_spent").stdout
    assert "written by stage 'audit'" in text and "raw data at the root of the chain" in text
    assert "every stage of the chain matches dvc.lock" in text


def test_lineage_refuses_on_a_stale_workspace_and_suggests_near_paths(tiny_project):
    bad = _lineage(tiny_project, "runs.dp.privacy.epsilon_spnt", check=False)
    assert bad.returncode == 2 and "near matches: runs.dp.privacy.epsilon_spent" in bad.stderr
    raw = tiny_project / "data/raw/personachat/valid_self_original_no_cands.txt"
    original = raw.read_bytes()
    raw.write_bytes(original + b"1 your persona: i edited this file without dvc repro.\n")
    try:
        res = _lineage(tiny_project, "runs.dp.privacy.epsilon_spent", check=False)
        assert res.returncode == 2 and res.stdout == ""
        (line,) = res.stderr.strip().splitlines()
        assert line.startswith("error: workspace no longer matches dvc.lock") and "preprocess@personachat" in line
        assert "run `dvc repro`" in line
    finally:
        raw.write_bytes(original)
    assert _lineage(tiny_project, "runs.dp.privacy.epsilon_spent", check=False).returncode == 0


def test_report_headline_and_plots_render_in_a_browser(tiny_project, tmp_path):
    """Headless chromium renders reports/index.html at 1400x900: the headline block is on the first screen with a
    card per run, and every plot is decoded and drawn (pixels, not just tags)."""
    import io

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright not installed (pip install -e '.[test]')")
    if chromium is None:
        pytest.skip("no chromium on PATH: .ci/run installs Debian's chromium when run as root")
    from PIL import Image

    def inked(png: bytes) -> float:  # share of pixels that are not (near) white
        img = Image.open(io.BytesIO(png)).convert("L")
        return sum(1 for v in img.getdata() if v < 235) / (img.width * img.height)

    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto((tiny_project / "reports/index.html").as_uri())
        page.screenshot(path=str(tmp_path / "first_screen.png"))
        head = page.locator("#headline")
        box = head.bounding_box()
        assert box and box["y"] + box["height"] <= 900, box  # the whole block on the first screen
        cards = page.locator("#headline .card")
        assert cards.count() == len(json.loads((tiny_project / "reports/metrics.json").read_text())["runs"])
        assert "accountant ε" in head.inner_text()
        assert all(len(cards.nth(i).locator(".reading").inner_text()) > 40 for i in range(cards.count()))
        assert inked(head.screenshot()) > 0.02
        imgs = page.locator("img")
        assert imgs.count() >= 4
        for i in range(imgs.count()):
            img = imgs.nth(i)
            img.scroll_into_view_if_needed()
            assert img.evaluate("e => e.complete && e.naturalWidth > 0"), img.get_attribute("alt")
            assert inked(img.screenshot()) > 0.01, img.get_attribute("alt")
        browser.close()
    assert inked((tmp_path / "first_screen.png").read_bytes()) > 0.02


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
        # (the design study's rows are committed, each at 95% by its own definition)
        report = re.sub(r"## Audit design study.*?(?=\n## )", "", report, flags=re.S)
        # (so are the DP engine self-check's: its 95% and 1 - alpha/K columns are its own design, params `selfcheck`)
        report = re.sub(r"## DP engine self-check.*?(?=\n## )", "", report, flags=re.S)
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


TRIGGER = """
import asyncio, json, sys
from prefect.client.orchestration import get_client
from prefect.deployments import run_deployment
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId
async def main():
    async with get_client() as c:
        dep = await c.read_deployment_by_name("leakage-audit-pipeline/leakage-audit")
        crons = [s.schedule.cron for s in dep.schedules if getattr(s.schedule, "cron", None)]
    fr = await run_deployment("leakage-audit-pipeline/leakage-audit",
                              parameters={"stages": ["report"]}, timeout=400)
    async with get_client() as c:
        arts = await c.read_artifacts(artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[fr.id])))
        head = [a.data for a in arts if a.key == "headline"]
    print(json.dumps({"crons": crons, "state": fr.state.type.value, "artifacts": sorted(a.key for a in arts),
                      "headline": head[0] if head else ""}))
asyncio.run(main())
"""


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_prefect_server_serves_a_scheduled_deployment_that_runs(tiny_project, tmp_path):
    """`leakaudit ui` starts a local Prefect server and serves the pipeline with a cron schedule; a triggered run
    completes against that server and publishes the stage's dvc.lock artifact and the headline artifact."""
    import signal
    import subprocess

    port = _free_port()
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect"), "PYTHONUNBUFFERED": "1"}
    log = (tmp_path / "ui.log").open("w")
    ui = subprocess.Popen([PYTHON, "-m", "flows.cli", "ui", "--port", str(port), "--cron", "0 3 * * *"],
                          cwd=tiny_project, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + 180
        while "Prefect UI: http://127.0.0.1" not in (tmp_path / "ui.log").read_text():
            assert ui.poll() is None and time.time() < deadline, (tmp_path / "ui.log").read_text()[-3000:]
            time.sleep(1)
        time.sleep(5)  # the deployment registers once serve() starts
        api = {**env, "PREFECT_API_URL": f"http://127.0.0.1:{port}/api"}
        out = subprocess.run([PYTHON, "-c", TRIGGER], cwd=tiny_project, env=api, capture_output=True, text=True,
                             timeout=480, check=False)
        assert out.returncode == 0, out.stderr[-3000:] + (tmp_path / "ui.log").read_text()[-3000:]
        res = json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        os.killpg(ui.pid, signal.SIGINT)
        try:
            ui.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(ui.pid, signal.SIGKILL)
        log.close()
    assert res["crons"] == ["0 3 * * *"]
    assert res["state"] == "COMPLETED", (tmp_path / "ui.log").read_text()[-3000:]
    assert {"dvc-lock-report", "pipeline-stages", "headline"} <= set(res["artifacts"])
    assert "accountant ε" in res["headline"] and "reports/index.html" in res["headline"]


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
    # DVC's own comparison of two experiments: the ROC data (a cached report output) and the headline metrics
    run(["dvc", "exp", "run", "--temp", "-q", "-n", "kpos-7", "-S", "audit.primary.k_pos=7"], tiny_project)
    plots = json.loads(run(["dvc", "plots", "diff", "kpos-0", "kpos-7", "--json"], tiny_project).stdout)["data"]
    roc = plots["reports/plots_data/roc/nondp_loss.json"][0]
    assert roc["revisions"] == ["kpos-0", "kpos-7"]
    assert {v["rev"] for v in roc["content"]["data"]["values"]} == {"kpos-0", "kpos-7"}
    assert "reports/plots_data/privacy/dp.json" in plots  # the privacy region with the DP run's canary ROC
    diff = json.loads(run(["dvc", "metrics", "diff", "kpos-0", "kpos-7", "--all", "--json"], tiny_project).stdout)
    head = diff["reports/headline.json"]
    assert {"dp.accountant_epsilon", "dp.audit_eps_lb_95", "nondp.strongest_tpr", "nondp.valid_perplexity"} <= set(head)
    # the sweep's tables reach the report through `dvc repro` (reports/sweeps is a dependency of `report`)
    assert ran(run(["dvc", "repro"], tiny_project).stdout) == {"report"}
    assert "Sweeps (DVC experiments)" in (tiny_project / "reports/report.md").read_text()
