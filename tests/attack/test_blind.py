"""Blind baselines: a model-free classifier on the text alone trips the shift flag on a shifted pool and not on
an exchangeable one (the flag, its Bonferroni family and what the report says differs)."""
import numpy as np
import pytest
from testkit.project import params

from stages.attack.blind import FEATURES, blind_scores, feature_differences, numeric_features, pool_fingerprint
from stages.audit.params import AuditParams
from stages.audit.roc import auroc
from stages.audit.shift import blind_pool, shift_check

WORDS = [f"w{i}" for i in range(300)]


def _texts(rng, n, lo, hi):
    return [" ".join(rng.choice(WORDS, int(rng.integers(lo, hi)))) for _ in range(n)]


AUDIT = params(AuditParams, "audit", bootstrap=500, shift_check={"power_trials": 500})


def _pool(texts, members, seed=0):
    s = blind_scores(texts, members, folds=5, seed=seed)
    notes = {"items": len(texts), "folds": 5, "differences": feature_differences(texts, members),
             "pool": pool_fingerprint([f"t{i}" for i in range(len(texts))], texts, members)}
    return s, blind_pool(s, np.asarray(members), notes, AUDIT)


def test_a_shifted_pool_trips_the_flag_and_says_length_differs():
    rng = np.random.default_rng(0)
    texts = _texts(rng, 80, 5, 15) + _texts(rng, 80, 20, 40)  # held-out rows are longer
    members = [True] * 80 + [False] * 80
    s, pool = _pool(texts, members)
    assert auroc(s, members) > 0.9
    runs = {"r": {"blind": {"text": pool}, "attacks": {}}}
    check = shift_check(runs, AUDIT)
    assert pool["flagged"] and check["flagged"] == ["r/text"] and check["family_size"] == 1
    assert pool["differences"][0]["feature"] in ("log characters", "log words")
    assert pool["differences"][0]["d"] < -1  # members are shorter


def test_an_exchangeable_pool_does_not_trip_the_flag():
    rng = np.random.default_rng(1)
    texts = _texts(rng, 160, 5, 40)
    members = list(rng.permutation([True] * 80 + [False] * 80))  # a coin decides: nothing to find
    s, pool = _pool(texts, members)
    assert 0.3 < auroc(s, members) < 0.7
    check = shift_check({"r": {"blind": {"text": pool}, "attacks": {}}}, AUDIT)
    assert not pool["flagged"] and check["flagged"] == []


def test_the_family_correction_counts_each_distinct_pool_once():
    def pool(p, fp):
        return {"p_value": p, "pool": fp, "members": 100, "non_members": 100, "auroc": 0.5, "auroc_ci95": (0.4, 0.6),
                "test": "Mann-Whitney (normal approximation)"}
    runs = {f"run{i}": {"blind": {"text": pool(p, fp)}, "attacks": {}}
            for i, (p, fp) in enumerate([(0.001, "a"), (0.02, "b"), (0.3, "c"), (0.3, "c")])}
    check = shift_check(runs, AUDIT)
    assert check["family_size"] == 3 and check["per_test_alpha"] == pytest.approx(0.05 / 3)  # run2 = run3: one pool
    assert check["flagged"] == ["run0/text"]  # 0.02 would pass alone at 0.05, not at 0.05 / 3
    assert [r["runs"] for r in check["pools"]] == [["run0"], ["run1"], ["run2", "run3"]]


def test_the_same_rows_and_labels_give_the_same_fingerprint_and_nothing_else_does():
    ids, texts, members = ["a", "b", "c"], ["x y", "z", "w"], [True, False, True]
    fp = pool_fingerprint(ids, texts, members)
    assert fp == pool_fingerprint(ids[::-1], texts[::-1], members[::-1])  # order-free
    assert fp != pool_fingerprint(ids, texts, [True, True, False])  # other labels
    assert fp != pool_fingerprint(ids, ["x y", "z", "v"], members)  # other text
    assert "x y" not in fp


def test_too_few_items_on_a_side_is_not_scored_and_features_are_text_only():
    assert blind_scores(["a", "b", "c"], [True, False, False], folds=5, seed=0) is None
    x = numeric_features(["Call 555-1234 on Mon, Jan 5 or mail a@b.com\nthanks"])
    got = dict(zip(FEATURES, x[0]))
    assert got["lines"] == 1 and got["dates"] >= 1 and got["addresses (email/URL)"] == 1 and got["numbers"] >= 3
