"""Users: user inference with power (reports/user_inference.json, flows/user_inference.py): Algorithm 1 canary users
over every TOFU author, per mechanism, substring length and documents per held-in user, with the prediction stated
before the runs and the experiments' commits (their lineage)."""
from __future__ import annotations

from ...shared.core.formatting import Table, ci, fmt
from ...shared.studies.user_inference import InferenceRow, read_table
from ..inputs import Inputs
from ..render import Section


def _docs(d) -> str:
    return {"mixed": "all counts together", "all": "all"}.get(d, str(d))


def inference_plot(rows: list[InferenceRow], first_length: int, path) -> None:
    """Left: AUROC against substring length (held-in users trained on all their documents); right: against the
    documents a held-in user was trained on, at the design's first length; a line per mechanism, 95% intervals."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullLocator

    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4), sharey=True)
    mechanisms = list(dict.fromkeys(r.mechanism for r in rows))
    ticks: dict = {left: set(), right: set()}
    numeric = [r.documents for r in rows if isinstance(r.documents, int)]
    at_all = 2 * max(numeric, default=2)  # where "all" stands on the documents axis: past every count run
    for i, mech in enumerate(mechanisms):
        for ax, pick, xkey in ((left, lambda r: r.documents == "all", "length"),
                               (right, lambda r: r.length == first_length and r.documents != "mixed",
                                "documents")):
            pts = sorted(((at_all if getattr(r, xkey) == "all" else getattr(r, xkey)), r) for r in rows
                         if r.mechanism == mech and pick(r) and r.auroc is not None)
            if not pts:
                continue
            ticks[ax] |= {x for x, _ in pts}
            xs = [x * (1 + 0.04 * (i - 1)) for x, _ in pts]  # a small dodge so intervals do not hide each other
            ys = [r.auroc for _, r in pts]
            lo = [y - (r.auroc_ci95 or (y, y))[0] for y, (_, r) in zip(ys, pts)]
            hi = [(r.auroc_ci95 or (y, y))[1] - y for y, (_, r) in zip(ys, pts)]
            ax.errorbar(xs, ys, yerr=[lo, hi], fmt="o-", capsize=3, label=mech)
    for ax, xlabel in ((left, "shared substring length (tokens; held-in users trained on all answers)"),
                       (right, f"documents a held-in user was trained on (length {first_length})")):
        ax.axhline(0.5, color="k", ls=":", lw=0.8)
        ax.set_xscale("log")
        if ticks[ax]:  # the values run, labelled as such ("all" at 12); no minor log ticks
            values = sorted(ticks[ax])
            ax.set_xticks(values, ["all" if ax is right and v == at_all else str(v) for v in values])
            ax.xaxis.set_minor_locator(NullLocator())
            ax.set_xlim(values[0] / 1.6, values[-1] * 1.6)
        ax.set_xlabel(xlabel, fontsize=8)
        ax.grid(alpha=0.3)
    left.set_ylabel("user-inference AUROC (95% CI)")
    left.set_title("against substring length", fontsize=9)
    right.set_title("against documents per user", fontsize=9)
    right.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def user_inference_section(inp: Inputs) -> Section | None:
    path = inp.user_inference
    if path is None or not path.is_file():
        return None
    data = read_table(path)
    design = data.design
    rows = [r for e in data.experiments for r in e.rows]
    commits = {e.experiment: e.commit[:10] for e in data.experiments}
    t = Table(["experiment (commit)", "mechanism", "accountant ε", "substring length", "documents per held-in user",
               "held in vs held out", "AUROC [95% CI]", "valid ppl"])
    for e in data.experiments:
        for r in e.rows:
            auc = ("–" if r.auroc is None else ci(r.auroc, r.auroc_ci95) if r.auroc_ci95
                   else f"{fmt(r.auroc, 3)} (exact p {fmt(r.auroc_p_exact, 3)})")
            t.rows.append([f"{e.experiment} ({commits[e.experiment]})", r.mechanism,
                           "–" if r.epsilon is None else fmt(r.epsilon, 2), r.length, _docs(r.documents),
                           f"{r.members} vs {r.non_members}", auc, fmt(r.valid_perplexity, 1)])
    images = []
    if rows:
        png = inp.plots_dir / "user_inference.png"
        inference_plot(rows, design.lengths[0], png)
        images.append(("User-inference AUROC on canary users (Algorithm 1) against substring length and against "
                       "documents per user, per mechanism (95% bootstrap intervals)", png))
    done = sorted(e.length for e in data.experiments)
    deltas = ", ".join(sorted({f"{r.delta:g}" for r in rows if r.delta is not None}))
    counts = ", ".join("all" if d is None else str(d) for d in design.documents)
    left = [n for n in design.lengths if n not in done]
    return Section("Users: user inference on canary users, with power", tables=[t] if rows else [], images=images,
                   paragraphs=[
        f"Kandpal et al. (2023)'s Algorithm 1 over every author of `{design.dataset}`: each author a canary user "
        "whose every answer carries one substring of its own text, inserted at a seeded position; "
        f"{design.per_length} canary users per experiment, half held in by a seeded permutation (independent of "
        "who the author is). A held-in author is trained on at most this many of its answers, the counts given in "
        f"turn: {counts}; each count's held-in users are scored against every held-out user of the "
        "length, whose scores no count touched (so the non-members are shared across counts). The score is "
        f"`{design.attack}`: the mean log-likelihood ratio of the fine-tuned model to the base model over the "
        "attacker's own samples of the user (never trained on). Three runs of one recipe "
        f"({data.recipe}): no DP, and DP-SGD over examples and over users (their accountant's ε in the table, at "
        f"δ = {deltas or '–'}). Design "
        "committed at "
        f"`{(data.design_commit or '?')[:10]}`, before any run, seed {design.seed}. Prediction, stated before "
        f"the runs: {design.prediction} "
        + (f"Lengths run: {', '.join(map(str, done))}"
           + (f"; not run yet: {', '.join(map(str, left))}, so the prediction about length is tested on "
              f"{len(done)} of its {len(design.lengths)} lengths only." if left else ".")
           + " Each cell's interval is read on its own (no correction over cells or mechanisms; the cells of one "
             "length share their held-out users)." if done
           else "No experiment is recorded yet: nothing here is a measurement.")])
