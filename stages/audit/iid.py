"""Canary sanity check (not evidence): before any audit, check that member and non-member canaries are exchangeable.

A one-run audit (or any MIA number) is only meaningful when members and non-members differ in
nothing but membership (Duan et al. 2024: most reported MIA success is distribution shift). For
every canary kind, members and non-members are compared on prefix length, corpus-frequency
profile of the prefix and of the secret (mean log(1 + count)), and the base model's loss of the
secret, with two-sample Kolmogorov-Smirnov tests at a Bonferroni-corrected level. Any rejected test
stops the audit with a message naming the kind and the statistic that shifted.
"""
from __future__ import annotations

import numpy as np
from scipy.stats import ks_2samp

from ..shared.core.errors import DataError

STATISTICS = {
    "prefix_length": "prefix length",
    "prefix_log_freq": "corpus frequency of the prefix tokens",
    "secret_log_freq": "corpus frequency of the secret tokens",
    "base_secret_loss": "base-model loss of the secret",
}


def canary_statistics(rows: list[dict]) -> dict[str, np.ndarray]:
    def base_loss(r):
        lp = r["base_token_logprobs"]
        return -float(np.sum(lp[-len(r["secret_ids"]):])) if lp else 0.0

    return {"prefix_length": np.array([len(r["prefix_ids"]) for r in rows], dtype=float),
            "prefix_log_freq": np.array([r["prefix_log_freq"] for r in rows], dtype=float),
            "secret_log_freq": np.array([r["secret_log_freq"] for r in rows], dtype=float),
            "base_secret_loss": np.array([base_loss(r) for r in rows], dtype=float)}


def _p(a: np.ndarray, b: np.ndarray) -> float:
    if len(a) == 0 or len(b) == 0:
        return 1.0
    if np.all(a == a[0]) and np.all(b == b[0]):
        return 1.0 if a[0] == b[0] else 0.0
    return float(ks_2samp(a, b).pvalue)


def sanity_check(canaries: dict[str, list[dict]], alpha: float, where: str = "canaries") -> dict:
    """p-values per kind and statistic; raises DataError naming the first shifted statistic."""
    report: dict = {"alpha": alpha, "tests": 0, "kinds": {}}
    for kind, rows in canaries.items():
        y = np.array([r["member"] for r in rows], dtype=bool)
        stats = canary_statistics(rows)
        report["kinds"][kind] = {name: _p(v[y], v[~y]) for name, v in stats.items()}
    report["tests"] = n = sum(len(v) for v in report["kinds"].values())
    report["corrected_alpha"] = level = alpha / max(1, n)
    for kind, ps in report["kinds"].items():
        for name, p in ps.items():
            if p < level:
                raise DataError(
                    f"{where}: canary sanity check: canaries {kind!r}: members and non-members differ in "
                    f"{STATISTICS[name]} "
                    f"(KS p = {p:.2g} < {alpha:g}/{n}); refusing to audit a shifted canary set")
    report["passed"] = True
    return report
