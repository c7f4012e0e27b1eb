"""ROC plots: one PNG per (run, attack) with a curve per canary kind, log-scaled FPR so the low-FPR
region the audit lives in is visible; plus the same points as JSON for ``dvc plots``."""
from __future__ import annotations

from pathlib import Path

import numpy as np


def roc_plot(curves: dict[str, tuple[np.ndarray, np.ndarray, float]], title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    for kind, (fpr, tpr, auc) in curves.items():
        for ax in axes:
            ax.step(fpr, tpr, where="post", label=f"{kind} (AUROC {auc:.3f})")
    grid = np.logspace(-4, 0, 50)
    for ax in axes:
        ax.plot(grid if ax is axes[1] else [0, 1], grid if ax is axes[1] else [0, 1], "k:", lw=0.8, label="chance")
        ax.set_xlabel("false positive rate")
        ax.set_ylabel("true positive rate")
        ax.grid(alpha=0.3)
    axes[0].set_title("ROC (linear)")
    axes[1].set_xscale("log")
    axes[1].set_yscale("log")
    axes[1].set_xlim(1e-3, 1)
    axes[1].set_ylim(1e-3, 1.05)
    axes[1].set_title("ROC (log-log, low-FPR region)")
    axes[0].legend(loc="lower right", fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def roc_points(curves: dict[str, tuple[np.ndarray, np.ndarray, float]]) -> list[dict]:
    return [{"kind": k, "fpr": float(f), "tpr": float(t)} for k, (fp, tp, _) in curves.items() for f, t in zip(fp, tp)]
