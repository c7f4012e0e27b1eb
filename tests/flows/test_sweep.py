"""Sweep tables on hand-made `dvc exp show` output, and the epsilon-hat columns of the sweep and variance tables at
confidences other than the default (on audit records made by the audit's own primary test)."""
from dataclasses import asdict

import numpy as np
import pytest
from testkit.project import ROOT

from flows.audit_study import plan
from flows.sweep import check_points, collect
from stages.audit.params import AuditParams
from stages.audit.primary import primary_test
from stages.audit.schema import METRICS_VERSION
from stages.shared.bounds.keys import confidence_key
from stages.shared.core.errors import ConfigError
from stages.shared.core.params import load, read_params
from stages.tools.studies.compare import canary_table, sweep_markdown
from stages.tools.studies.params import StudyParams
from stages.variance.api import RUN, markdown, points, tabulate
from stages.variance.params import VarianceParams
from stages.variance.schema import read_points, write_points


def _metrics(run, kind, tpr, auroc, primary=True):
    b, p = f"runs.{run}.attacks.loss.{kind}", f"runs.{run}.audit_primary"
    return {f"{b}.members": 10, f"{b}.non_members": 12, f"{b}.auroc": auroc,
            f"{b}.auroc_ci95": [auroc - 0.1, auroc + 0.05],
            f"{b}.tpr_at_fpr.0.01.value": tpr, f"{b}.tpr_at_fpr.0.01.ci95": [0.0, tpr + 0.1],
            **({f"{p}.kind": kind, f"{p}.attack": "loss", f"{p}.k_pos": 100, f"{p}.k_neg": 0, f"{p}.eps_lb_95": 1.5,
                f"{p}.eps_lb_99": 1.25} if primary else {})}


def test_collect_reads_named_experiments_from_dvc_exp_show():
    show = [{"rev": "workspace", "experiments": None},
            {"rev": "abc", "experiments": [{"revs": [
                {"name": "s-0", "rev": "1" * 40, "data": {"metrics": {"reports/metrics.json": {"data": {
                    "runs": {"nondp": {"attacks": {"loss": {"random": {"auroc": 0.5}}}}}}}}}},
                {"name": "other", "rev": "2" * 40, "data": {}}]}]}]
    (row,) = collect(show, ["s-0"])
    assert row == {"experiment": "s-0", "rev": "1" * 40, "metrics": {"runs.nondp.attacks.loss.random.auroc": 0.5}}
    # the committed metrics file, when readable, is used whole: `dvc exp show` drops lists such as intervals
    (row,) = collect(show, ["s-0"], read=lambda rev: {"a": {"auroc_ci95": [0.1, 0.2]}} if rev == "1" * 40 else None)
    assert row["metrics"] == {"a.auroc_ci95": [0.1, 0.2]}


def test_canary_table_has_one_line_per_run_and_kind_with_intervals():
    m = {**_metrics("nondp", "new_token", 0.5, 0.9), **_metrics("dp", "random", 0.0, 0.5),
         **_metrics("dp", "text", 0.1, 0.6, primary=False), **_metrics("nondp", "random", 0.2, 0.7, primary=False),
         "runs.users.dataset": "x"}
    md = canary_table([{"experiment": "s-0", "rev": "1" * 40, "metrics": m}], {"s-0": ["canaries.kinds=[x]"]})
    lines = md.splitlines()
    assert len(lines) == 5  # header, rule, three (run, kind) lines: no text rows, nothing for a run without canaries
    assert ("| s-0 | canaries.kinds=[x] | dp | random | 10 / 12 | 0.000 [0.000, 0.100] | 0.500 [0.400, 0.550] | "
            "loss, k₊=100, k₋=0 | 1.500 | 1.250 |") in lines
    assert "| nondp | new_token |" in lines[3] and "0.500 [0.000, 0.600]" in lines[3]
    # a kind that is not the run's primary shows its MIA numbers and no bound
    assert "| nondp | random |" in lines[4] and lines[4].endswith("| – | – | – |")
    assert canary_table([{"experiment": "s-0", "rev": None, "metrics": {}}], {}) == ""


def _audited(confidences) -> dict:
    """metrics.json of one run with canaries as the audit writes it (its primary test computed by the audit's own
    code from scores that separate members), with ``audit.primary.confidences`` set to ``confidences``."""
    raw = read_params(ROOT / "params.yaml")
    raw["audit"]["primary"]["confidences"] = list(confidences)
    params = load(AuditParams, "audit", raw=raw)
    rng = np.random.default_rng(0)
    members = rng.integers(0, 2, 400)
    scores = 3.0 * members + rng.normal(size=400)
    primary = primary_test({params.primary.kind: {params.primary.attack: (np.arange(400), scores, members)}},
                           params, 1e-5, RUN)
    registered = {**asdict(params.primary), "confidences": list(params.primary.confidences)}
    run = {"privacy": {"epsilon_spent": 8.0, "delta": 1e-5, "noise_multiplier": 0.6, "sample_rate": 0.1,
                       "profile": [{"delta": 1e-5, "epsilon": 8.0}]},
           "utility": {"valid_nll": 2.5}, "audit_primary": primary,
           "attacks": {"loss": {params.primary.kind: {"members": 200, "non_members": 200, "auroc": 0.97,
                                                      "auroc_ci95": [0.95, 0.98]}}}}  # the sweep's canary table
    return {"schema_version": METRICS_VERSION, "audit_params": {"primary": registered}, "runs": {RUN: run}}


@pytest.mark.parametrize("confidences", [(0.9, 0.99), (0.95, 0.99), (0.8,)])
def test_the_sweep_and_variance_tables_follow_audit_primary_confidences(tmp_path, confidences):
    metrics = _audited(confidences)
    primary = metrics["runs"][RUN]["audit_primary"]
    assert all(primary[confidence_key(c)] > 0 for c in confidences)  # the scores separate: every bound is positive
    first = f"{primary[confidence_key(confidences[0])]:.3f}"
    show = [{"rev": "abc", "experiments": [{"revs": [{"name": "s-0", "rev": "1" * 40, "data": {}}]}]}]
    # the sweep table, from the committed metrics file and from `dvc exp show`'s scalars (no confidences list)
    for read in (lambda rev: metrics, None):
        if read is None:
            show[0]["experiments"][0]["revs"][0]["data"] = {"metrics": {"reports/metrics.json": {"data": metrics}}}
        rows = collect(show, ["s-0"], read=read)
        md = sweep_markdown("s", "f" * 40, rows, {"s-0": ["audit.primary.confidences=[...]"]}).splitlines()
        header = next(line for line in md if line.startswith("| experiment | commit"))
        assert header.endswith(f"| audit_primary.{confidence_key(confidences[0])} |")
        assert next(line for line in md if line.startswith("| s-0 | `1111")).endswith(f"| {first} |")
        canary = [line for line in md if line.startswith("| s-0 | audit")]
        tags = [f"ε̂{confidence_key(c)[len('eps_lb_'):]}" for c in confidences]
        assert next(line for line in md if "| primary test |" in line).endswith(" | ".join(tags) + " |")
        assert canary[0].endswith(" | ".join(f"{primary[confidence_key(c)]:.3f}" for c in confidences) + " |")
    # the variance sweep table: eps_hat at the first confidence, eps_hat_99 at 0.99 where listed
    point = points(load(VarianceParams, "variance", ROOT / "params.yaml").sweep)[0]
    rows = tabulate([point], {point["point"]: {"rev": "a" * 40}}, {}, lambda rev: metrics["runs"][RUN], "air", 10.0,
                    confidences)
    write_points(tmp_path / "points.parquet", rows, {"sweep": "t", "base_commit": "f" * 40})
    (row,), _ = read_points(tmp_path / "points.parquet")
    assert row["status"] == "completed" and row["eps_hat"] == primary[confidence_key(confidences[0])]
    assert row["eps_hat_99"] == (primary[confidence_key(0.99)] if 0.99 in confidences else None)
    assert f"| ε̂{confidence_key(confidences[0])[len('eps_lb_'):]} |" in markdown(rows, "t", "f" * 40, confidences)


@pytest.mark.parametrize("sets, error", [
    (["finetune.lr=-1"], r"params.yaml with sweep point s-0: finetune\.lr: must be > 0"),
    (["canaries.kinds=[random]"], r"audit\.primary\.kind: must be one of canaries\.kinds"),  # a cross-section rule
    (["+finetune.lrr=0.1"], r"finetune\.lrr: unknown key"),
    (["finetune.lr=[1"], r"sweep point s-0: --set finetune\.lr=\[1: "),                      # DVC cannot parse it
])
def test_a_bad_sweep_point_fails_before_queueing_with_one_line_naming_the_key(sets, error):
    check_points(ROOT, {"ok-0": ["canaries.kinds=[random]", "audit.primary.kind=random"]})
    with pytest.raises(ConfigError, match=error) as err:
        check_points(ROOT, {"ok-0": ["finetune.lr=0.002"], "s-0": sets})
    assert "\n" not in str(err.value)


def test_every_audit_study_point_validates():
    """A study experiment drops the other runs, and with them the attack lists and guessing rules naming them."""
    raw = read_params(ROOT / "params.yaml")
    study = load(StudyParams, "study", raw=raw)
    for phase in ("development", "confirmation", "recipes"):
        pts = plan(phase, study, raw)
        check_points(ROOT, {name: p["sets"] for name, p in pts.items()})
