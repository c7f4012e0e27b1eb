"""Blind baselines: a model-free classifier on the text alone trips the shift flag on a shifted pool and not on
an exchangeable one (the flag, its Bonferroni family and what the report says differs)."""
import numpy as np
import pytest

from stages.attack.blind import FEATURES, blind_scores, feature_differences, numeric_features
from stages.audit.params import AuditParams
from stages.audit.roc import auroc
from stages.audit.shift import blind_pool, shift_check
from support import params

WORDS = [f"w{i}" for i in range(300)]


def _texts(rng, n, lo, hi):
    return [" ".join(rng.choice(WORDS, int(rng.integers(lo, hi)))) for _ in range(n)]


def _pool(texts, members, seed=0):
    s = blind_scores(texts, members, folds=5, seed=seed)
    notes = {"items": len(texts), "folds": 5, "differences": feature_differences(texts, members)}
    return s, blind_pool(s, np.asarray(members), notes, params(AuditParams, "audit", bootstrap=500))


def test_a_shifted_pool_trips_the_flag_and_says_length_differs():
    rng = np.random.default_rng(0)
    texts = _texts(rng, 80, 5, 15) + _texts(rng, 80, 20, 40)  # held-out rows are longer
    members = [True] * 80 + [False] * 80
    s, pool = _pool(texts, members)
    assert auroc(s, members) > 0.9
    runs = {"r": {"blind": {"text": pool}}}
    check = shift_check(runs, alpha=0.05)
    assert pool["flagged"] and check["flagged"] == ["r/text"] and check["family_size"] == 1
    assert pool["differences"][0]["feature"] in ("log characters", "log words")
    assert pool["differences"][0]["d"] < -1  # members are shorter


def test_an_exchangeable_pool_does_not_trip_the_flag():
    rng = np.random.default_rng(1)
    texts = _texts(rng, 160, 5, 40)
    members = list(rng.permutation([True] * 80 + [False] * 80))  # a coin decides: nothing to find
    s, pool = _pool(texts, members)
    assert 0.3 < auroc(s, members) < 0.7
    check = shift_check({"r": {"blind": {"text": pool}}}, alpha=0.05)
    assert not pool["flagged"] and check["flagged"] == []


def test_the_family_correction_uses_every_pool():
    pools = {f"run{i}": {"blind": {"text": {"p_value": p}}} for i, p in enumerate([0.001, 0.02, 0.3])}
    check = shift_check(pools, alpha=0.05)
    assert check["family_size"] == 3 and check["per_test_alpha"] == pytest.approx(0.05 / 3)
    assert check["flagged"] == ["run0/text"]  # 0.02 would pass alone at 0.05, not at 0.05 / 3


def test_too_few_items_on_a_side_is_not_scored_and_features_are_text_only():
    assert blind_scores(["a", "b", "c"], [True, False, False], folds=5, seed=0) is None
    x = numeric_features(["Call 555-1234 on Mon, Jan 5 or mail a@b.com\nthanks"])
    got = dict(zip(FEATURES, x[0]))
    assert got["lines"] == 1 and got["dates"] >= 1 and got["addresses (email/URL)"] == 1 and got["numbers"] >= 3
