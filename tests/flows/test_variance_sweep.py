"""The variance sweep for real: two points of tiny models on a Dask LocalCluster (prefect-dask) whose workers run in
a directory holding no copy of the driver's workspace; code travels through a bare git remote, data through a local DVC
remote, experiments come back through both. One point is made to fail and is recorded as failed."""
import json
import time

import pytest
import yaml
from testkit.project import PYTHON, run

pytestmark = [pytest.mark.slow, pytest.mark.longest]  # about 13 min: scheduled first (tests/conftest.py)


def test_two_point_sweep_on_a_local_cluster_through_git_and_dvc_remotes(reproduced_project, tmp_path):
    from stages.variance.schema import read_points

    project = reproduced_project  # the shared upstream (canaries, secrets) reproduced, pushed once
    p = yaml.safe_load((project / "params.yaml").read_text())
    studies = yaml.safe_load((project / "studies.yaml").read_text())
    studies["variance"]["sweep"].update(
        name="t", epsilons=[8.0], grid={"batch_size": [4, 100000], "steps": [2], "lr": [0.01]}, seeds=[0],
        run={"dataset": "tofu", "objective": "sft", "canaries": True, "max_length": 32, "max_text_rows": 16,
             "eval_rows": 8},
        attacks=["loss", "air"], retries=0, work_dir=str(tmp_path / "remotes"), worker_dir=str(tmp_path / "clones"))
    p["audit"]["primary"].update(attack="loss", kind="new_token")  # a test before may have left another primary
    (project / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
    (project / "studies.yaml").write_text(yaml.safe_dump(studies, sort_keys=False))
    run(["git", "add", "-A"], project)
    run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "sweep params"], project)
    # the driver runs from an empty directory, so the LocalCluster's worker processes start there, holding no copy
    # of the driver's workspace; they clone into worker_dir, also outside it
    empty = tmp_path / "worker-home"
    empty.mkdir()
    t = time.time()
    out = run([PYTHON, "-m", "flows.variance", "--repo", str(project)], empty,
              env={"PREFECT_HOME": str(tmp_path / "prefect")})
    print(f"two-point sweep: {time.time() - t:.0f} s")
    log = out.stdout + out.stderr
    assert f"worker cwd {empty}," in log and f"clone {tmp_path / 'clones'}/" in log, log[-3000:]
    assert "1 of 2 points completed" in out.stdout, out.stdout[-3000:]
    # driver and workers share one temporary Prefect server (a worker would otherwise start its own)
    assert log.count("Starting temporary server") == 1 and "Error logging to API" not in log, log[-3000:]
    assert "point t-e8-b4-t2-lr0p01-s0: clone" in log and "experiment" in log  # each point logs its phase times
    rows, meta = read_points(project / "reports/variance/points.parquet")
    assert meta["sweep"] == "t" and len(rows) == 2
    ok, bad = rows
    assert ok["status"] == "completed" and ok["error"] is None and ok["batch_size"] == 4
    assert bad["status"] == "failed" and "batch_size" in bad["error"] and bad["rev"] is None
    assert ok["eps_spent"] == pytest.approx(8.0, rel=0.02) and ok["sigma"] > 0 and ok["profile"]
    assert ok["utility"] == pytest.approx(-ok["valid_loss"]) and ok["score_mean"] is not None
    assert ok["eps_hat"] is not None and ok["measure"] == "air"
    # the experiment came back through the git remote: its commit holds the point's params and metrics
    shown = yaml.safe_load(run(["git", "show", f"{ok['rev']}:params.yaml"], project).stdout)
    assert shown["runs"]["point"]["batch_size"] == 4 and shown["runs"]["point"]["dp"]["epsilon"] == 8.0
    assert ok["point"] in run(["dvc", "exp", "list", "--all-commits", "--name-only"], project).stdout
    bare = tmp_path / "remotes/remote.git"
    assert ok["rev"] in run(["git", "--git-dir", str(bare), "for-each-ref", "refs/exps"], project).stdout
    # its outputs went to the DVC remote; the workers' clones lived outside the driver and are gone
    assert any((tmp_path / "remotes/dvc-remote").rglob("*")) and not any((tmp_path / "clones").iterdir())
    assert not (empty / "params.yaml").exists() and not any(empty.glob("*.parquet"))
    # --retabulate rebuilds the same table from the experiments it names, rerunning no point; a file that is not a
    # sweep table is a one-line error naming it
    table = project / "reports/variance/points.parquet"
    before = table.read_bytes()
    table.write_bytes(before[:100])
    retab = [PYTHON, "-m", "flows.variance", "--repo", str(project), "--retabulate"]
    out = run(retab, empty, check=False)
    last = out.stderr.strip().splitlines()[-1]
    assert out.returncode == 2 and last.startswith("error: ") and "points.parquet" in last, out.stderr[-2000:]
    table.write_bytes(before)
    out = run(retab, empty, env={"PREFECT_HOME": str(tmp_path / "prefect")})
    assert "table rebuilt from 1 experiments" in out.stdout and table.read_bytes() == before
    # the analysis stage runs on the table and the report shows it
    run(["dvc", "repro", "variance"], project)
    analysis = json.loads((project / "reports/variance/analysis/analysis.json").read_text())
    assert analysis["completed"] == 1 and analysis["failed"][0]["point"] == bad["point"]
    one = analysis["statistics"]["mean"]["8"]  # one point: no control test can pass, so nothing is fitted
    assert one["withheld"] and one["regressions"]["individual"]["skipped"] == one["withheld"]

    # the pre-registered study through the same machinery: 2 configurations x 2 fresh seeds of the dp recipe, its
    # table rewritten as each model completes; a rerun resumes (trains nothing), a changed design is refused
    from stages.variance.schema import read_audit_points

    (project / "reports/variance/audit_points.parquet").unlink()  # the project's own study (another design)
    p = yaml.safe_load((project / "params.yaml").read_text())
    studies = yaml.safe_load((project / "studies.yaml").read_text())
    studies["variance"]["study"].update(run="dp", seeds=[3201, 3202], configs={
        "X": {"batch_size": 4, "steps": 2, "lr": 0.01}, "Y": {"batch_size": 8, "steps": 2, "lr": 0.02}})
    (project / "studies.yaml").write_text(yaml.safe_dump(studies, sort_keys=False))
    run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qam", "study params"], project)
    assert (project / "reports/variance/audit_points.parquet").exists() is False
    study = [PYTHON, "-m", "flows.variance", "--repo", str(project), "--study"]
    t = time.time()
    out = run(study, empty, env={"PREFECT_HOME": str(tmp_path / "prefect")})
    print(f"four-model study: {time.time() - t:.0f} s")
    assert "4 of 4 models completed" in out.stdout, (out.stdout + out.stderr)[-3000:]
    path = project / "reports/variance/audit_points.parquet"
    rows, meta = read_audit_points(path)
    assert [(r["config"], r["seed"]) for r in rows] == [("X", 3201), ("X", 3202), ("Y", 3201), ("Y", 3202)]
    assert meta["study"]["seeds"] == [3201, 3202] and meta["recipe"] == p["runs"]["dp"]
    for r in rows:
        assert r["status"] == "completed" and r["seed_status"] == "confirmation", r
        assert r["delta"] == 1e-5 and r["accountant_epsilon"] == pytest.approx(8.0, rel=0.02)
        assert r["m"] == 60 and r["r"] == 10 and r["eps_lb_95"] is not None and r["gdp_eps_lb_95"] is not None
        assert r["ideal_eps_lb_95_median"] >= 0 and r["valid_perplexity"] > 1 and r["exposure"] is not None
        assert r["member_shift"] is not None and r["exposure_control"] is not None
        shown = yaml.safe_load(run(["git", "show", f"{r['rev']}:params.yaml"], project).stdout)
        assert shown["canaries"]["seed"] == r["seed"] and shown["runs"]["dp"]["seed"] == r["seed"]
        assert shown["runs"]["dp"]["batch_size"] == r["batch_size"] and shown["attack"]["runs"]["dp"] == ["loss",
                                                                                                         "exposure"]
    # each model its own canary draw: the two seeds' canaries differ
    assert len({r["rev"] for r in rows}) == 4
    before = path.read_bytes()
    out = run(study, empty, env={"PREFECT_HOME": str(tmp_path / "prefect")})
    assert "4 of 4 models completed" in out.stdout and "0 to train" in out.stdout + out.stderr
    assert path.read_bytes() == before
    # the design never changes under a table that has models; an unregistered seed is refused before any model
    for seeds, says in (([3201, 3203], "audit_points.parquet: written for another study design"),
                        ([3201, 7], "variance.study.seeds: must stand in audit.seeds.preregistered")):
        studies["variance"]["study"]["seeds"] = seeds
        (project / "studies.yaml").write_text(yaml.safe_dump(studies, sort_keys=False))
        out = run(study, empty, check=False, env={"PREFECT_HOME": str(tmp_path / "prefect")})
        last = out.stderr.strip().splitlines()[-1]
        assert out.returncode == 2 and last.startswith("error: ") and says in last, out.stderr[-2000:]
    assert path.read_bytes() == before
