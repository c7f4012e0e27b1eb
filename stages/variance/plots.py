"""Plots of the variance analysis: the jitter plot (seed Fig. 2), the selection layout (Fig. 9) and the
privacy profiles (Fig. 11)."""
from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from ..core.seeds import stream


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> None:
    from ..core.io import atomic_file

    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight", metadata={"Software": None})
    _plt().close(fig)


def eps_delta(eps: str, deltas: Sequence[float]) -> str:
    """ "ε = 8 at δ = 0.00866": every epsilon shown with the delta it holds at."""
    return f"ε = {eps} at δ = {' / '.join(f'{d:.3g}' for d in deltas)}" if deltas else f"ε = {eps}"


def jitter_plot(points: Sequence[Mapping], stats: Sequence[str], label: str, path: Path,
                seed: int = stream("variance.jitter").int_seed()) -> None:
    """Per target epsilon (x) every configuration's seed-mean score (dots, jittered) and every seed (small
    crosses); the SD over configurations is printed above each group."""
    plt = _plt()
    rng = np.random.default_rng(seed)
    eps = sorted({float(p["epsilon"]) for p in points})
    fig, axes = plt.subplots(1, len(stats), figsize=(4.2 * len(stats), 3.6), squeeze=False)
    for ax, stat in zip(axes[0], stats):
        for gi, e in enumerate(eps):
            cfg: dict = {}
            for p in points:
                if float(p["epsilon"]) == e and p.get(stat) is not None:
                    cfg.setdefault((p["batch_size"], p["steps"], p["lr"]), []).append(float(p[stat]))
            means = np.array([np.mean(v) for v in cfg.values()])
            xs = gi + rng.uniform(-0.18, 0.18, len(means))
            for x, v in zip(xs, cfg.values()):
                ax.scatter([x] * len(v), v, marker="x", s=12, color="0.6", zorder=1)
            ax.scatter(xs, means, s=36, color="C0", edgecolor="k", linewidths=0.5, zorder=2)
            sd = np.std(means, ddof=1) if len(means) > 1 else float("nan")
            top = max((max(v) for v in cfg.values()), default=0.0)
            ax.text(gi, top, f"sd {sd:.3f}", ha="center", va="bottom", fontsize=8)
        ax.set_xticks(range(len(eps)), [eps_delta(f"{e:g}", sorted({float(p["delta"]) for p in points
                                                                     if float(p["epsilon"]) == e and p.get("delta")}))
                                         for e in eps], fontsize=7)
        ax.set_xlim(-0.6, len(eps) - 0.4)
        ax.set_ylabel(f"{label} {stat} (fine-tuned − base)")
        ax.grid(alpha=0.3)
    fig.suptitle("Empirical privacy variance: one dot per configuration (mean over seeds), × per seed", fontsize=9)
    _save(fig, path)


def selection_plot(means: Sequence[Mapping], stat: str, picks: Mapping[str, int], label: str, eps: str,
                   path: Path) -> None:
    """Configurations at one epsilon: validation loss (x) against the score (y), with each method's pick on
    the whole pool."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5, 3.6))
    x = [-float(m["utility"]) for m in means]
    y = [float(m[stat]) for m in means]
    ax.scatter(x, y, color="0.5", s=28, label="configuration (mean over seeds)")
    for (name, i), mk, c in zip(picks.items(), ("*", "s", "v"), ("C3", "C0", "C2")):
        ax.scatter([x[i]], [y[i]], marker=mk, s=140 if mk == "*" else 70, facecolor="none", edgecolor=c,
                   linewidths=1.6, label=name)
    ax.set_xlabel("validation loss (lower = better utility)")
    ax.set_ylabel(f"{label} {stat} (fine-tuned − base)")
    ax.set_title(f"Selection at {eps}", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    _save(fig, path)


def profiles_plot(profiles: Sequence[Mapping], eps: str, path: Path) -> None:
    """The accountant's privacy profile eps(delta) of each configuration (they cross at the target)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5, 3.6))
    for p in profiles:
        d = [q["delta"] for q in p["profile"]]
        e = [q["epsilon"] for q in p["profile"]]
        ax.plot(d, e, marker=".", label=f"b={p['batch_size']}, T={p['steps']} (σ={p['sigma']:.2f})")
    ax.set_xscale("log")
    ax.set_xlabel("δ")
    ax.set_ylabel("ε(δ)")
    ax.set_title(f"Privacy profiles, target {eps}", fontsize=9)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    _save(fig, path)
