"""ROC plots: one PNG per (run, attack) with a curve per canary kind, log-scaled FPR so the low-FPR
region the audit lives in is visible; plus the same points as JSON for ``dvc plots``."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..audit.schema import Exposure


def roc_plot(panels: dict[str, dict[str, tuple[np.ndarray, np.ndarray, float]]], title: str, path: Path) -> None:
    """One log-log ROC panel per attack, a curve per item group (canary kind, text, users)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import LogLocator, NullLocator

    n = max(1, len(panels))
    cols = min(n, 4)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 3.4 * rows), squeeze=False)
    grid = np.logspace(-3, 0, 50)
    for ax, (attack, curves) in zip(axes.flat, panels.items()):
        for group, (fpr, tpr, auc) in curves.items():
            label = f"{auc:.2f}" if isinstance(auc, float) and np.isfinite(auc) else "n/a"
            ax.step(np.clip(fpr, 1e-3, 1), tpr, where="post", label=f"{group} ({label})")
        ax.plot(grid, grid, "k:", lw=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        for axis in (ax.xaxis, ax.yaxis):  # decades only: minor log ticks on every panel cost 2-3x the drawing time
            axis.set_major_locator(LogLocator(base=10, numticks=5))
            axis.set_minor_locator(NullLocator())
        ax.set_xlim(1e-3, 1)
        ax.set_ylim(1e-3, 1.05)
        ax.set_title(attack, fontsize=10)
        ax.set_xlabel("FPR", fontsize=8)
        ax.set_ylabel("TPR", fontsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right", title="group (AUROC)", title_fontsize=7)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.suptitle(title)
    # fixed margins in inches (tick labels, axis labels and titles have fixed font sizes), without tight_layout's
    # measuring pass over every label of every panel
    width, height = fig.get_size_inches()
    fig.subplots_adjust(left=0.65 / width, right=1 - 0.15 / width, bottom=0.5 / height, top=1 - 0.62 / height,
                        wspace=0.32, hspace=0.42)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def roc_points(curves: dict[str, tuple[np.ndarray, np.ndarray, float]]) -> list[dict]:
    return [{"group": k, "fpr": float(f), "tpr": float(t)} for k, (fp, tp, _) in curves.items() for f, t in zip(fp, tp)]


def region_tpr(fpr: np.ndarray, eps: float, delta: float) -> np.ndarray:
    """Largest TPR an (eps, delta)-DP mechanism allows at each FPR (Kairouz et al. 2015, seed eq. 3)."""
    return np.minimum.reduce([np.ones_like(fpr), np.exp(eps) * fpr + delta,
                              1 - np.exp(-eps) * np.clip(1 - delta - fpr, 0, None)])


def privacy_plot(profile: list[dict], curves: dict, eps: float, delta: float, eps_hat: float | None, title: str,
                 path: Path) -> None:
    """Left: the accountant's epsilon(delta). Right: empirical ROCs inside the privacy region."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4.2))
    d = [p["delta"] for p in profile]
    a.plot(d, [p["epsilon"] for p in profile], "o-")
    a.axvline(delta, color="grey", ls=":", lw=0.8)
    a.set_xscale("log")
    a.set_xlabel("δ")
    a.set_ylabel("ε (accountant upper bound)")
    a.set_title("privacy profile ε(δ)")
    a.grid(alpha=0.3)
    grid = np.logspace(-4, 0, 200)
    b.fill_between(grid, 0, region_tpr(grid, eps, delta), color="tab:green", alpha=0.12,
                   label=f"allowed by (ε={eps:.2f}, δ={delta:.0e})")
    if eps_hat:
        b.plot(grid, region_tpr(grid, eps_hat, delta), "g--", lw=0.8, label=f"boundary at ε̂={eps_hat:.2f}")
    for kind, (fpr, tpr, _auc) in curves.items():
        b.step(np.clip(fpr, 1e-4, 1), tpr, where="post", label=kind)
    b.plot(grid, grid, "k:", lw=0.8)
    b.set_xscale("log")
    b.set_yscale("log")
    b.set_xlim(1e-3, 1)
    b.set_ylim(1e-3, 1.05)
    b.set_xlabel("false positive rate")
    b.set_ylabel("true positive rate")
    b.set_title("privacy region and the attack's ROC")
    b.legend(fontsize=7, loc="lower right")
    b.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def exposure_plot(summary: dict[str, Exposure], title: str, path: Path) -> None:
    """Mean exposure of inserted canaries against their number of repetitions, per format."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for fmt, s in summary.items():
        if fmt == "all" or not s.mean_exposure_by_repetitions:
            continue
        reps = sorted(s.mean_exposure_by_repetitions, key=int)
        ax.plot([int(r) for r in reps], [s.mean_exposure_by_repetitions[r] for r in reps], "o-", label=fmt)
    ax.axhline(1.0, color="k", ls=":", lw=0.8, label="median exposure by chance (1)")
    ax.set_xlabel("repetitions in training")
    ax.set_ylabel("exposure (bits)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def ceiling_plot(rows: list[dict], label: str, path: Path) -> None:
    """Per DP regime, on one epsilon axis: the accountant's epsilon, the last-iterate epsilon, the ideal audit's
    median with its 10-90% range (assumption-free and GDP) and the measured bounds (absent for planned regimes).
    ``rows``: {name, accountant, last_iterate, ideal: (p10, median, p90), ideal_gdp: (...), measured, measured_gdp}."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 1.2 + 0.9 * len(rows)))
    for i, r in enumerate(rows):
        y = len(rows) - 1 - i
        ax.plot([r["accountant"]], [y + 0.2], "s", color="k", label="accountant ε" if i == 0 else None)
        ax.plot([r["last_iterate"]], [y + 0.2], "D", color="tab:purple",
                label="last-iterate ε (heuristic)" if i == 0 else None)
        for dy, key, color, name in ((0.0, "ideal", "tab:blue", "assumption-free"),
                                     (-0.2, "ideal_gdp", "tab:orange", "Gaussian-DP")):
            lo, med, hi = r[key]
            ax.errorbar([med], [y + dy], xerr=[[med - lo], [hi - med]], fmt="o", mfc="white", color=color,
                        capsize=3, label=f"ideal {label} {name}: median, 10–90%" if i == 0 else None)
            got = r["measured" if key == "ideal" else "measured_gdp"]
            if got is not None:
                ax.plot([got], [y + dy], "*", ms=12, color=color, label=f"measured {label} {name}" if i == 0 else None)
    ax.set_yticks(range(len(rows)), [r["name"] for r in reversed(rows)])
    ax.set_xlabel("ε (at the run's δ)")
    ax.set_xlim(left=0)
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.25 - 0.1 / max(len(rows), 1)), ncol=2)
    ax.set_title("What the audit could show (ideal) vs what it showed (measured)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


# ----------------------------------------------------------------------------- data for `dvc plots`
def region_points(eps: float, delta: float, curves: dict, n: int = 60) -> list[dict]:
    """The (ε, δ) privacy region's upper boundary and the canary ROCs as one table (group, fpr, tpr), the data of
    the privacy-region plot for `dvc plots show/diff`."""
    grid = np.logspace(-4, 0, n)
    pts = [{"group": f"region (eps={eps:.2f})", "fpr": float(f), "tpr": float(t)}
           for f, t in zip(grid, region_tpr(grid, eps, delta))]
    return pts + roc_points(curves)


def exposure_points(summary: dict[str, Exposure]) -> list[dict]:
    """(format, repetitions, mean exposure) rows: the exposure plot's data for `dvc plots`."""
    return [{"format": fmt_name, "repetitions": int(k), "mean_exposure": float(v)}
            for fmt_name, m in summary.items() for k, v in sorted(m.mean_exposure_by_repetitions.items(),
                                                                   key=lambda kv: int(kv[0]))]
