"""Report sections that turn checks into words: the blind-baseline verdicts and the canary-kind comparison."""
from pathlib import Path

from stages.report.build import Inputs, _kinds_sentence, blind_section
from stages.report.render import to_markdown


def _pool(auroc, p, flagged, d):
    return {"items": 40, "folds": 5, "members": 20, "non_members": 20, "auroc": auroc,
            "auroc_ci95": [auroc - .1, auroc + .1], "p_value": p, "flagged": flagged,
            "differences": [{"feature": "log characters", "members": 4.1, "non_members": 5.0, "d": d}]}


def _inputs(runs):
    metrics = {"runs": runs, "shift_check": {"alpha": 0.05, "family_size": 2}, "audit_params": {}}
    return Inputs(metrics, {}, None, {}, {}, True, Path("."), Path("."))


def test_a_flagged_pool_is_called_invalid_and_says_what_differs():
    runs = {"a": {"attacks": {"loss": {"text": {"auroc": 0.8, "auroc_ci95": [0.7, 0.9]}}},
                  "blind": {"text": _pool(0.85, 0.001, True, -1.3)}},
            "b": {"attacks": {"loss": {"text": {"auroc": 0.52, "auroc_ci95": [0.4, 0.6]}}},
                  "blind": {"text": _pool(0.5, 0.4, False, 0.1)}}}
    md = to_markdown("t", [blind_section(_inputs(runs))], Path("."))
    rows = [ln for ln in md.splitlines() if ln.startswith("| a ") or ln.startswith("| b ")]
    assert "INVALID MIA: distribution shift" in rows[0] and "log characters" in rows[0] and "d = -1.30" in rows[0]
    assert "no shift detected" in rows[1] and "no length/format feature differs" in rows[1]
    assert "0.05/2" in md


def test_kinds_sentence_is_true_to_the_parameterisation():
    t = {"paradigm": "lora", "lora_r": 8, "lora_targets": ["q_proj", "v_proj"], "virtual_tokens": 16,
         "new_token_rows": 1000, "secret_token_rows": 990, "parameters": 2_000_000, "secret_rows": True}
    fair = _kinds_sentence({"nondp": t})
    assert "differ only in how the secret is chosen" in fair and "990 vocabulary tokens" in fair and "LoRA r=8" in fair
    unfair = _kinds_sentence({"nondp": {**t, "secret_rows": False, "secret_token_rows": 0}})
    assert "Not a like-for-like comparison" in unfair and "differ only" not in unfair
