"""Plots of the variance analysis: the jitter plot (seed Fig. 2), the selection layout (Fig. 9) and the
privacy profiles (Fig. 11)."""
from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from ..shared.core.seeds import stream


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> None:
    from ..shared.core.io import atomic_file

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


def study_plot(study: Mapping, path: Path) -> None:
    """The pre-registered study: per configuration (x) each model's one-run epsilon-hat95 (dots), the median of the
    ideal one-run audit at its q, T, sigma (a bar: the heuristic last-iterate model), and the pooled bound over its
    models (a diamond); the accountant's epsilon as a dashed line."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    names = [c["config"] for c in study["configs"]]
    for i, c in enumerate(study["configs"]):
        ys = [m["eps_lb_95"] for m in study["models"] if m["config"] == c["config"] and m["status"] == "completed"
              and m["eps_lb_95"] is not None]
        xs = i + np.linspace(-0.12, 0.12, len(ys)) if len(ys) > 1 else [i] * len(ys)
        ax.scatter(xs, ys, s=22, color="tab:blue", zorder=3, label="one model (seed)" if i == 0 else None)
        if c["median_ideal_eps_lb_95_median"] is not None:
            ax.hlines(c["median_ideal_eps_lb_95_median"], i - 0.3, i + 0.3, color="tab:gray", lw=2,
                      label="ideal median (heuristic)" if i == 0 else None)
        if c["pooled"]["eps_lb_95"] is not None:
            ax.scatter([i + 0.32], [c["pooled"]["eps_lb_95"]], marker="D", s=30, color="tab:orange", zorder=3,
                       label="pooled over its models" if i == 0 else None)
    ax.axhline(study["epsilon"], ls="--", color="tab:red", lw=1, label=f"accountant ε = {study['epsilon']:g}")
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels([f"{c['config']}\nb {c['batch_size']}, T {c['steps']}, η {c['lr']:g}"
                        for c in study["configs"]], fontsize=8)
    ax.set_ylabel("one-run ε̂ (95%)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"Pre-registered study at (ε, δ) = ({study['epsilon']:g}, {study['delta']:g}): "
                 f"{study['completed']} of {study['registered']} models", fontsize=9)
    ax.legend(fontsize=7, loc="upper right")
    _save(fig, path)
