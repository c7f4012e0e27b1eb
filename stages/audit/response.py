"""Why a run's audit shows what it shows: the canary response and the canaries' gradient diagnostics.

* ``canary_response``: the canaries of the primary kind binned by how many steps sampled them (0: non-members
  and members never drawn, 1, 2, 3+; the fine-tune's auditor-side record), each attack's mean score per bin in
  units of the non-members' spread (z), with a 95% bootstrap interval, next to what the linear last-iterate model
  (``ceiling.py``) predicts for an ideal canary: each inclusion adds one clipped gradient (sensitivity 1) against
  per-step noise sigma, so a canary sampled k times sits k / (sqrt(T) sigma) null standard deviations up. A real
  score far below that line loses the signal somewhere (clipping, the optimizer, the score), which the gradient
  diagnostics help place.
  ``member_shift``: the members' mean z (their mean score minus the non-members', in non-member standard deviations),
  the continuous counterpart of the one-run bound (variance.study's secondary measure).
* ``canary_gradients``: the fine-tune's measurement at the initial model (per-example gradient norm against the
  clip norm, and the share of it in the secret token's own rows), passed on as recorded.
"""
from __future__ import annotations

import math

import numpy as np
from scipy.stats import binom

from ..finetune.schema import PrivacyRecord
from .roc import bootstrap_mean_ci

BINS = ("0", "1", "2", "3+")


def ideal_z(bin_: str, sample_rate: float, steps: int, noise_multiplier: float) -> float:
    """The linear model's mean statistic of a canary in ``bin_``, in null standard deviations (sqrt(T) sigma)."""
    scale = math.sqrt(steps) * noise_multiplier
    if bin_ != "3+":
        return int(bin_) / scale
    k = np.arange(3, int(steps) + 1)
    w = binom.pmf(k, int(steps), sample_rate)
    return float((k * w).sum() / w.sum()) / scale if w.sum() > 0 else float("nan")


def canary_response(canaries: dict, kind: str, inclusions: dict[str, int], privacy: PrivacyRecord,
                    bootstrap: int, seed: int, min_count: int) -> dict | None:
    """Per attack that scored ``kind``: per inclusion bin, canaries, mean z [95% bootstrap; none for a bin of fewer
    than ``min_count`` canaries], and the ideal z (DP)."""
    if kind not in canaries:
        return None
    dp = privacy.dp
    out: dict = {"kind": kind, "bins": list(BINS), "ideal_model": "linear last-iterate (heuristic)" if dp else None,
                 "attacks": {}}
    for attack, (ids, s, y) in canaries[kind].items():
        counts = np.array([inclusions.get(str(i), 0) if m else 0 for i, m in zip(ids.tolist(), y)])
        null = s[~y]
        sd = float(null.std(ddof=1)) if len(null) > 1 else float("nan")
        z = (s - float(null.mean())) / sd if sd > 0 else np.full(len(s), np.nan)
        rows = {}
        for b in BINS:
            sel = counts >= 3 if b == "3+" else counts == int(b)
            vals = z[sel]
            rows[b] = {"canaries": int(sel.sum()), "mean_z": float(vals.mean()) if len(vals) else None,
                       "ci95": list(ci) if (ci := bootstrap_mean_ci(vals, bootstrap, seed, min_count=min_count))
                       else None,
                       "ideal_z": ideal_z(b, privacy.sample_rate, privacy.steps, privacy.noise_multiplier)
                       if dp else None}
        slope = np.polyfit(counts[y], z[y], 1)[0] if len(set(counts[y].tolist())) > 1 else float("nan")
        shift = float(z[y].mean()) if y.any() and sd > 0 else None
        out["attacks"][attack] = {"bins": rows, "z_per_inclusion": float(slope), "member_shift": shift,
                                  "ideal_z_per_inclusion": (1 / (math.sqrt(privacy.steps)
                                                                 * privacy.noise_multiplier)) if dp else None}
    return out
