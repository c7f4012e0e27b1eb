"""Memorization of real secrets (VMR, AIR) against the base model and the randomised control."""
from __future__ import annotations

from ...shared.core.formatting import Table, ci
from ..inputs import Inputs
from ..render import Section
from .positive_control import null_wording


def memorization_section(inp: Inputs) -> Section | None:
    mem = Table(["run", "dataset", "metric", "secrets", "fine-tuned", "base model", "fine-tuned − base [95% CI]",
                 "control: held-out secrets (fine-tuned − base) [95% CI]", "control"])
    for run, r in inp.runs.items():
        for atk, m in (r.memorization or {}).items():
            t, u, c = m.trained, m.untrained, m.control
            how = (f"randomised: a seeded coin per secret ({c.coin_trained} trained, {c.coin_held_out} held "
                   f"out; {c.rows_dropped} rows with a held-out secret dropped; {c.trained_still_present} of "
                   f"the {c.coin_trained} coin-trained secrets still in a training row)") if m.randomised \
                else "NOT randomised: trained = occurs in a training row (confounded by frequency)"
            mem.rows.append([run, r.dataset, atk.upper(), t.secrets, t.score, t.base_score,
                             ci(t.minus_base, t.minus_base_ci95) if t.secrets else "–",
                             f"{ci(u.minus_base, u.minus_base_ci95)} (n={u.secrets})" if u.secrets else "–",
                             how])
    if not mem.rows:
        return None
    return Section("Memorization of real secrets", tables=[mem], paragraphs=null_wording(inp, ("vmr",)) + [
        "VMR: share of 10 sampled continuations (temperature 1, top-k 50) of a secret's prompt s1 that equal "
        "its continuation s2 verbatim; AIR: the author's genre appears in any of 10 sampled answers of at most "
        "20 tokens. The base model's rate is subtracted to remove leakage fine-tuning did not cause. The control: "
        "of the first finetune.secret_control.secrets secrets found in the run's training rows, a seeded coin held "
        "each in or out, and every training row containing a held-out secret was dropped, so the trained and "
        "held-out secrets differ only by training and the difference between the two columns is attributable to "
        "it (the held-out column should be near 0). The comparison is by the coin (intention to treat): a "
        "coin-trained secret whose only rows also held a held-out one was dropped with them and still counts as "
        "trained, which dilutes the trained arm; the control column says how many remained. Where an arm holds more "
        "secrets than are scored (attack.generation.max_secrets; the control as many as the trained arm), the "
        "scored ones are a seeded random draw from that arm (attack.generation.arm_seed), never the secrets file's "
        "order, which is by frequency."])
