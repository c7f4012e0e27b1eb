"""The shift guard states its power and words its verdict by it: a detectable shift is flagged, a shift too small
for the pool's size reads "guard too weak at this size" (never "no shift"), and a clean pool under a strong attack
reads "no shift detected". Pools are scored by the real blind classifier (stages/attack/blind.py)."""
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from testkit import records
from testkit.project import params

from stages.attack.blind import blind_scores, feature_differences, pool_fingerprint
from stages.audit.params import AuditParams
from stages.audit.roc import auroc, paired_auroc_difference, roc_curve, roc_metrics
from stages.audit.schema import Blind, GroupMetrics, Metrics, RunMetrics, ShiftCheck
from stages.audit.shift import blind_pool, detectable_auroc, shift_check, verdict
from stages.report.inputs import Inputs
from stages.report.render import to_markdown
from stages.report.sections.blind import blind_section
from stages.report.sections.membership import canary_users_table, mia_section
from stages.shared.core.records import read_record

AUDIT = params(AuditParams, "audit", bootstrap=300, shift_check={"power_trials": 1000})
WORDS = [f"w{i}" for i in range(400)]


def _texts(rng, n):
    return [" ".join(rng.choice(WORDS, int(rng.integers(8, 30)))) for _ in range(n)]


def _dated(texts, share, rng):
    """A date ("Mon, Jan 5") added to ``share`` of the texts: the shift the issue measured on PersonaChat pools."""
    pick = rng.random(len(texts)) < share
    return [f"Mon, Jan {rng.integers(1, 28)} {t}" if p else t for t, p in zip(texts, pick)]


def _run(texts, members, mia_auroc, tag):
    ids = [f"{tag}-{i}" for i in range(len(texts))]
    s = blind_scores(texts, members, folds=5, seed=0)
    notes = {"items": len(texts), "folds": 5, "differences": feature_differences(texts, members),
             "pool": pool_fingerprint(ids, texts, members)}
    pool = blind_pool(s, np.asarray(members), notes, AUDIT)
    return {"blind": {"text": pool}, "attacks": {"loss": {"text": {"auroc": mia_auroc, "auroc_ci95": (0.4, 0.7),
                                                                   "members": 100, "non_members": 100,
                                                                   "tpr_at_fpr": {}}}}}


def _group(m: dict, where: str) -> GroupMetrics:
    """One pool's ROC metrics as the audit wrote them (``roc_metrics``), read as the report reads them."""
    return read_record(GroupMetrics, m, where)


def _run_record(r: dict, **fields) -> RunMetrics:
    """A run as the report reads it: a committed run with the audit's blind pools (as ``shift_check`` left them) and
    attacks of ``r`` (``_run``) in place of its own, and ``fields`` replaced."""
    return records.run_metrics(
        blind={g: read_record(Blind, pool, f"blind.{g}") for g, pool in r["blind"].items()},
        attacks={atk: {g: _group(m, f"attacks.{atk}.{g}") for g, m in groups.items()}
                 for atk, groups in r["attacks"].items()}, **fields)


def _metrics(runs: dict[str, RunMetrics], **fields) -> Metrics:
    """The committed metrics with only ``runs`` (and ``fields``) replaced, ``audit.min_per_side`` 10."""
    committed = records.committed_metrics()
    return records.metrics(runs=runs, audit_params=replace(committed.audit_params, min_per_side=10), **fields)


def _inputs(metrics: Metrics, roc: dict | None = None, out: Path = Path(".")) -> Inputs:
    return Inputs(metrics, roc or {}, None, {}, {}, True, out, out)


def test_a_detectable_shift_is_flagged_and_a_too_small_one_reads_guard_too_weak():
    rng = np.random.default_rng(0)
    members = [True] * 100 + [False] * 100
    big = _dated(_texts(rng, 100), 1.0, rng) + _texts(rng, 100)       # every member dated
    small = _dated(_texts(rng, 100), 0.05, rng) + _texts(rng, 100)    # 5% of members dated
    clean = _texts(rng, 200)                                          # nothing differs
    runs = {"big": _run(big, members, 0.56, "b"), "small": _run(small, members, 0.56, "s"),
            "clean": _run(clean, members, 0.9, "c")}
    check = shift_check(runs, AUDIT)
    got = {row["runs"][0]: row for row in check["pools"]}
    assert got["big"]["verdicts"] == {"big": "shift"} and runs["big"]["blind"]["text"]["flagged"]
    # the small shift is not flagged, and an attack AUROC of 0.56 sits below what the guard can see at 200 items:
    assert not got["small"]["flagged"] and got["small"]["verdicts"] == {"small": "too_weak"}
    assert got["small"]["power"]["auroc"] > 0.56
    assert got["clean"]["verdicts"] == {"clean": "no_shift"}  # a 0.9 attack on a clean pool: that shift would show
    inputs = _inputs(_metrics({run: _run_record(r) for run, r in runs.items()},
                              shift_check=read_record(ShiftCheck, check, "shift_check")))
    md = to_markdown("t", [blind_section(inputs)], Path("."))
    rows = {r.split("|")[2].strip(): r for r in md.splitlines() if r.startswith("| text ")}
    assert "INVALID MIA: distribution shift" in rows["big"]
    assert "guard too weak at this size" in rows["small"] and "no shift detected" not in rows["small"]
    assert "no shift detected" in rows["clean"]
    assert "detectable blind AUROC (80% power)" in md and "0.05/3" in md


def test_runs_sharing_a_pool_are_tested_once_and_judged_by_their_own_attacks():
    rng = np.random.default_rng(3)
    texts, members = _texts(rng, 200), [True] * 100 + [False] * 100
    strong, weak = _run(texts, members, 0.9, "x"), _run(texts, members, 0.55, "x")
    check = shift_check({"nondp": strong, "dp": weak}, AUDIT)
    assert check["family_size"] == 1 and check["pools"][0]["runs"] == ["nondp", "dp"]
    assert check["pools"][0]["verdicts"] == {"nondp": "no_shift", "dp": "too_weak"}
    inputs = _inputs(_metrics({"nondp": _run_record(strong), "dp": _run_record(weak)},
                              shift_check=read_record(ShiftCheck, check, "shift_check")))
    md = to_markdown("t", [blind_section(inputs)], Path("."))
    assert "nondp: no shift detected; dp: guard too weak at this size" in md


def test_power_rises_with_the_pool_and_vanishes_on_a_handful():
    at = lambda n, exact=False: detectable_auroc(n, n, 0.05 / 3, exact, 0.8, 1000, 0)["auroc"]  # noqa: E731
    a100, a1000 = at(100), at(1000)
    assert 0.58 < a100 < 0.67  # the injections: 0.557 flagged 1/12, 0.645 flagged 10/12 at 200 items
    assert a1000 < a100
    assert detectable_auroc(3, 1, 0.05, True, 0.8, 500, 0)["auroc"] is None  # exact p >= 1/4 > 0.05: never flagged
    assert verdict(False, None, 0.99) == "too_weak" and verdict(True, None, None) == "shift"


def test_no_interval_below_the_minimum_per_side_only_the_exact_p():
    scores, members = np.array([0.9, 0.8, 0.7, 0.1]), np.array([True, True, True, False])  # 3 held-in vs 1 held-out
    m = roc_metrics(scores, members, [0.01], 100, 0, min_per_side=10)
    assert m["auroc"] == 1.0 and m["auroc_ci95"] is None and m["tpr_at_fpr"]["0.01"]["ci95"] is None
    assert m["auroc_p_exact"] == pytest.approx(0.25)  # 1 of the 4 relabellings ranks the lone non-member last
    g = _group(m, "canary_users")
    runs = {"users": records.run_metrics(attacks={"user_inference": {"canary_users": g}},
                                         canary_users_by_length={"user_inference": {"1": g}})}
    inputs = _inputs(_metrics(runs))
    table = canary_users_table(inputs)
    cell = table.rows[0][-1]
    assert "[" not in cell and "exact p = 0.250" in cell and "1.000 [1.000, 1.000]" not in cell
    big = roc_metrics(np.arange(24.0), np.arange(24) % 2 == 0, [0.01], 100, 0, min_per_side=10)  # 12 vs 12
    assert big["auroc_ci95"] is not None and "auroc_p_exact" not in big


def test_the_attack_minus_blind_difference_is_paired():
    rng = np.random.default_rng(1)
    y = np.r_[np.ones(100, bool), np.zeros(100, bool)]
    blind = rng.normal(size=200)
    same = paired_auroc_difference(blind, blind, y, 200, 0, 10)
    assert same["value"] == 0 and same["ci95"] == (0.0, 0.0)  # paired: identical scores never differ
    strong = paired_auroc_difference(blind + 1.5 * y, blind, y, 200, 0, 10)
    assert strong["value"] == pytest.approx(auroc(blind + 1.5 * y, y) - auroc(blind, y))
    assert strong["ci95"][0] > 0
    assert paired_auroc_difference(blind[:8], blind[:8], np.r_[[True] * 4, [False] * 4], 200, 0, 10)["ci95"] is None


def test_the_mia_table_shows_the_difference_and_no_interval_for_small_sides(tmp_path):
    rng = np.random.default_rng(2)
    y_text, y_users = np.r_[[True] * 100, [False] * 100], np.r_[[True] * 7, [False] * 8]
    s_text, s_users = rng.normal(size=200) + 0.4 * y_text, rng.normal(size=15)
    m = roc_metrics(s_text, y_text, [0.01], 200, 0, 10)
    m["minus_blind"] = {"value": 0.08, "ci95": (0.01, 0.15)}
    small = roc_metrics(s_users, y_users, [0.01], 200, 0, 10)
    small["minus_blind"] = paired_auroc_difference(s_users, s_users[::-1], y_users, 200, 0, 10)
    template = records.run_metrics()  # a run without DP, with both blind pools: here neither flagged
    assert not template.privacy.dp
    runs = {"r": replace(template, dataset="enron_users",
                         attacks={"loss": {"text": _group(m, "text")},
                                  "user_inference": {"users": _group(small, "users")}},
                         attacks_skipped={}, canary_users_by_length=None, audit_exploratory=None, audit_primary=None,
                         blind={g: replace(template.blind[g], flagged=False) for g in ("text", "users")})}
    roc = {("r", "loss", "text"): roc_curve(s_text, y_text),
           ("r", "user_inference", "users"): roc_curve(s_users, y_users)}
    inputs = _inputs(_metrics(runs), roc, tmp_path)
    md = to_markdown("t", [mia_section(inputs)], tmp_path)
    rows = {r.split("|")[3].strip(): r.split("|") for r in md.splitlines() if r.startswith("| r ")}
    assert "0.080 [0.010, 0.150]" in rows["text"][6] and "[" in rows["text"][5]
    assert "[" not in "".join(rows["users"][5:]) and "exact p = " in rows["users"][5]  # 7 vs 8: no interval anywhere
    assert "too few per side" in rows["users"][6]
