"""The attack-strength table's rows and the strongest attack's margin, from a run's metrics and scores."""
import numpy as np
import pytest

from stages.audit.roc import auroc, roc_metrics
from stages.tools.studies.attacks import compared, margin, markdown, rows_of


def _run(scores: dict, y) -> dict:
    return {"attacks": {a: {"users": roc_metrics(s, y, [0.01], 200, 0, 10)} for a, s in scores.items()},
            "blind": {"users": {"flagged": False}}}


def test_rows_rank_attacks_and_the_margin_is_a_paired_difference():
    rng = np.random.default_rng(0)
    y = rng.random(300) < 0.5
    base = rng.normal(0, 1, 300)
    scores = {"loss": base + 0.3 * y, "ez_mia": base + 1.0 * y, "min_k": rng.normal(0, 1, 300) + 0.1 * y}
    rows = rows_of(_run(scores, y), "users", "0.01")
    assert [r["attack"] for r in rows] == ["ez_mia", "loss", "min_k"]
    assert [r["family"] for r in rows] == ["2024-2026", "2023", "2023"]
    ids = [f"u{i}" for i in range(300)]
    shuffled = np.random.default_rng(1).permutation(300)  # the 2023 attack's rows in another order: matched by id
    data = {"ez_mia": (ids, scores["ez_mia"], y),
            "loss": ([ids[i] for i in shuffled], scores["loss"][shuffled], y[shuffled])}
    d = margin(rows, data, 200, 0, 10)
    assert (d["newer"], d["strongest_2023"]) == ("ez_mia", "loss")
    assert d["value"] == pytest.approx(auroc(scores["ez_mia"], y) - auroc(scores["loss"], y))
    assert 0 < d["ci95"][0] < d["value"] < d["ci95"][1]  # correlated scores: the paired interval excludes 0
    text = markdown("users", rows, "0.01", d)
    assert "Strongest here: ez_mia" in text and "ez_mia, minus the 2023 family's, loss" in text
    assert text.count("\n| ") >= 4


def test_the_margin_is_negative_when_the_2023_family_is_strongest():
    rng = np.random.default_rng(2)
    y = rng.random(100) < 0.5
    scores = {"loss": y + rng.normal(0, 1, 100), "ez_mia": rng.normal(0, 1, 100), "zlib": rng.normal(0, 1, 100)}
    rows = rows_of(_run(scores, y), "users", "0.01")
    assert rows[0]["attack"] == "loss" and compared(rows) == ["ez_mia", "loss"]
    ids = list(range(100))
    d = margin(rows, {a: (ids, scores[a], y) for a in compared(rows)}, 100, 0, 10)
    assert d["value"] < 0 and margin(rows, {}, 100, 0, 10) is None
    assert "Strongest here: loss" in markdown("users", rows, "0.01", d)
