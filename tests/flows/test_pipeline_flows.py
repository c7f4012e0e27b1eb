"""The reproduced tiny project driven as a user drives it beyond `dvc repro`: the report in a browser, the Prefect
flow over the DVC stages, a Prefect server serving a scheduled deployment, a sweep as DVC experiments.

Each test reads the reproduced template (fixture reproduced_template) or changes its own copy of it (fixture
reproduced_project): every test runs alone or in any order.
"""
import json
import os
import re
import shutil
import time

import pytest
import yaml
from testkit.project import ALL_STAGES, PYTHON, ran, run

pytestmark = pytest.mark.slow


def test_report_headline_and_plots_render_in_a_browser(request, tmp_path):
    """Headless chromium renders reports/index.html at 1400x900: the headline block is on the first screen with a
    card per run, and every plot is decoded and drawn (pixels, not just tags)."""
    import io

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright not installed (pip install -e '.[test]')")
    if chromium is None:
        pytest.skip("no chromium on PATH: .ci/run installs Debian's chromium when run as root")
    from PIL import Image

    project = request.getfixturevalue("reproduced_template").path  # read only; reproduced once a browser is there

    def inked(png: bytes) -> float:  # share of pixels that are not (near) white
        img = Image.open(io.BytesIO(png)).convert("L")
        return sum(1 for v in img.getdata() if v < 235) / (img.width * img.height)

    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto((project / "reports/index.html").as_uri())
        page.screenshot(path=str(tmp_path / "first_screen.png"))
        head = page.locator("#headline")
        box = head.bounding_box()
        assert box and box["y"] + box["height"] <= 900, box  # the whole block on the first screen
        cards = page.locator("#headline .card")
        assert cards.count() == len(json.loads((project / "reports/metrics.json").read_text())["runs"])
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


def test_prefect_flow_runs_the_dag_through_dvc(reproduced_project, tmp_path):
    project = reproduced_project
    # only the report title changes: DVC reruns just `report`, every stage still gets its task + artifact
    p = yaml.safe_load((project / "params.yaml").read_text())
    p["report"]["title"] = "flow run"
    (project / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
    env = {"PREFECT_HOME": str(tmp_path / "prefect"), "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120"}
    os.environ.update(env)
    try:
        out = run([PYTHON, "-m", "flows.pipeline"], project)
        q = json.loads(run([PYTHON, "-c", QUERY], project).stdout.strip().splitlines()[-1])
    finally:
        for k in env:
            os.environ.pop(k, None)
    assert len(q["runs"]) == 1 and q["runs"][0]["state"] == "COMPLETED", out.stdout[-2000:]
    keys = {a["key"] for a in q["artifacts"] if a["flow_run_id"] == q["runs"][0]["id"]}
    expected = {"dvc-lock-" + re.sub(r"[^a-z0-9-]+", "-", s.lower()) for s in ALL_STAGES}
    assert expected <= keys and "pipeline-stages" in keys
    assert "flow run" in (project / "reports/report.md").read_text()


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


def test_prefect_server_serves_a_scheduled_deployment_that_runs(reproduced_project, tmp_path):
    """`leakaudit ui` starts a local Prefect server and serves the pipeline with a cron schedule; a triggered run
    completes against that server and publishes the stage's dvc.lock artifact and the headline artifact."""
    project = reproduced_project
    import signal
    import subprocess

    port = _free_port()
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect"), "PYTHONUNBUFFERED": "1"}
    log = (tmp_path / "ui.log").open("w")
    ui = subprocess.Popen([PYTHON, "-m", "leakaudit.cli", "ui", "--port", str(port), "--cron", "0 3 * * *"],
                          cwd=project, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + 180
        while "Prefect UI: http://127.0.0.1" not in (tmp_path / "ui.log").read_text():
            assert ui.poll() is None and time.time() < deadline, (tmp_path / "ui.log").read_text()[-3000:]
            time.sleep(1)
        time.sleep(5)  # the deployment registers once serve() starts
        api = {**env, "PREFECT_API_URL": f"http://127.0.0.1:{port}/api"}
        out = subprocess.run([PYTHON, "-c", TRIGGER], cwd=project, env=api, capture_output=True, text=True,
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


def test_sweep_flow_runs_dvc_experiments_and_tabulates_kinds(reproduced_project, tmp_path):
    project = reproduced_project
    # one sweep point that changes only audit params (k_pos 5 -> 6): the experiment reruns audit and report, the
    # rest is cached.
    # As a user would: the reproduced state (dvc.lock, metrics) is committed before experimenting.
    run(["git", "add", "-A"], project)
    run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "reproduced"], project)
    env = {"PREFECT_HOME": str(tmp_path / "prefect"), "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120"}
    os.environ.update(env)
    try:
        run([PYTHON, "-m", "flows.sweep", "--name", "kpos", "--set", "audit.primary.k_pos=6", "--key",
             "audit_primary.k_pos"],
            project)
    finally:
        for k in env:
            os.environ.pop(k, None)
    res = json.loads((project / "reports/sweeps/kpos.json").read_text())
    assert res["points"] == {"kpos-0": ["audit.primary.k_pos=6"]}
    assert res["baseline"] == run(["git", "rev-parse", "HEAD"], project).stdout.strip()
    (row,) = res["rows"]
    assert row["experiment"] == "kpos-0" and re.fullmatch(r"[0-9a-f]{40}", row["rev"])
    assert row["metrics"]["runs.nondp.audit_primary.k_pos"] == 6
    md = (project / "reports/sweeps/kpos.md").read_text()
    # the canary table: one line per run and kind, with bootstrap intervals
    kind_lines = [ln for ln in md.splitlines() if ln.startswith("| kpos-0 | audit.primary.k_pos=6 |")]
    assert {tuple(c.strip() for c in ln.split("|")[3:5]) for ln in kind_lines} == {
        (r, k) for r in ("nondp", "dp") for k in ("new_token", "random", "unigram", "bigram", "model_based")}
    assert all(re.search(r"\d\.\d{3} \[\d\.\d{3}, \d\.\d{3}\]", ln) for ln in kind_lines)
    assert "kpos-0" in run(["dvc", "exp", "list", "--all-commits"], project).stdout
    # DVC's own comparison of the experiment with its baseline commit: the ROC data (a cached report output) and
    # the headline metrics
    plots = json.loads(run(["dvc", "plots", "diff", "HEAD", "kpos-0", "--json"], project).stdout)["data"]
    roc = plots["reports/plots_data/roc/nondp_loss.json"][0]
    assert set(roc["revisions"]) == {"HEAD", "kpos-0"}
    assert {v["rev"] for v in roc["content"]["data"]["values"]} == {"HEAD", "kpos-0"}
    assert "reports/plots_data/privacy/dp.json" in plots  # the privacy region with the DP run's canary ROC
    diff = json.loads(run(["dvc", "metrics", "diff", "HEAD", "kpos-0", "--all", "--json"], project).stdout)
    head = diff["reports/headline.json"]
    assert {"dp.accountant_epsilon", "dp.audit_eps_lb_95", "nondp.strongest_tpr", "nondp.valid_perplexity"} <= set(head)
    # the sweep's tables reach the report through `dvc repro` (reports/sweeps is a dependency of `report`)
    assert ran(run(["dvc", "repro"], project).stdout) == {"report"}
    assert "Sweeps (DVC experiments)" in (project / "reports/report.md").read_text()
