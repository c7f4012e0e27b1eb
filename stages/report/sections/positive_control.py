"""Can the instruments see? (reports/positive_control.json, flows/positive_control.py): every instrument's measure on
the default run, on the memorising profile (non-DP full fine-tunes at each checkpoint) and on its DP counterpart, on
the same pools, with the predictions stated before the runs and their verdicts; beside them its power follow-up
(reports/positive_control_power.json: the last checkpoint's recipe with more users and secrets) where it ran."""
from __future__ import annotations

from ...audit.schema import RunMetrics, instrument_rows
from ...shared.core.formatting import Table, ci, fmt
from ...shared.studies.positive_control import Experiment, PositiveControlTable, read_table
from ...shared.studies.rows import AurocRow, EiaRow, InstrumentRow
from ..inputs import Inputs
from ..render import Section

#: what each instrument's measure is, as the table names it
MEASURE = {"vmr": "VMR minus base", "air": "AIR minus base", "eia": "token F1"}
POOLS = {"text": "text rows", "users": "real users", "canary_users": "canary users (Algorithm 1)",
         "trained": "trained secrets", "held_out": "held-out secrets (control)", "test": "unseen test texts"}
FOLLOW_UP = "power follow-up"


def _power(inp: Inputs) -> PositiveControlTable | None:
    """The power follow-up's table (reports/positive_control_power.json), None where it has not run."""
    path = inp.positive_control_power
    return read_table(path) if path is not None and path.is_file() else None


def _sizes(row: InstrumentRow) -> str:
    """What a row stands on: members vs non-members, or the arm's secrets ("" where not recorded)."""
    if isinstance(row, AurocRow):
        return f"{row.members} vs {row.non_members}"
    return f"{row.members} secrets" if row.members is not None else ""


def _counted(row: InstrumentRow | None) -> str:
    """``_shown`` with the sizes it stands on."""
    if row is None:
        return "–"
    return _shown(row) + (f" ({_sizes(row)})" if _sizes(row) else "")


def _experiment_words(ex: Experiment) -> str:
    """An experiment's name, commit and wall-clock time (a stage DVC restored from its run cache adds none)."""
    took = (f"{ex.seconds / 60:.0f} min wall clock on the machine that ran it, stages restored from DVC's run cache "
            "not counted" if ex.seconds else "time not recorded")
    return f"`{ex.experiment}` (commit `{ex.commit[:10]}`, {took})"


def _strongest(profile: list, more: list) -> object | None:
    """The profile's strongest non-DP row (the highest measure); where its interval covers chance and a row of the
    power follow-up (``more``: more units at the last checkpoint) excludes it, that row."""
    mem = [r for r in profile if r.checkpoint != "dp" and r.measure is not None]
    best = max(mem, key=lambda r: r.measure) if mem else None
    if best is None or not best.sees():
        seen = [r for r in more if r.checkpoint != "dp" and r.measure is not None and r.sees()]
        best = max(seen, key=lambda r: r.measure) if seen else best
    return best


def _shown(row: InstrumentRow | None) -> str:
    if row is None:
        return "–"
    if isinstance(row, AurocRow):
        return ci(row.auroc, row.auroc_ci95, row.auroc_p_exact)
    shown = fmt(row.value, 3) if row.ci95 is None else ci(row.value, row.ci95)
    if isinstance(row, EiaRow):
        base = row.baseline
        return shown + (f" (baseline {fmt(base, 3)})" if base is not None else " (no baseline recorded)")
    return shown


def default_rows(runs: dict[str, RunMetrics], dataset: str) -> tuple[str | None, dict[tuple[str, str], InstrumentRow]]:
    """The default run on ``dataset`` without DP, and its rows by (instrument, pool), from this report's metrics."""
    run = next((r for r, m in runs.items() if m.dataset == dataset and not m.privacy.dp), None)
    if run is None:
        return None, {}
    return run, {(x.instrument, x.pool): x for x in instrument_rows(runs[run])}


def _loss_panel(ax, ex: Experiment, epochs: list, dp_x: float, dp_label: str) -> None:
    """The losses of held-in and held-out users' attacker samples and of the validation rows per checkpoint, the DP
    counterpart's hollow at ``dp_x``."""
    pts = [c for c in ex.checkpoints if not c.dp]
    dp = next((c for c in ex.checkpoints if c.dp), None)
    series = (("held-in users", "o-", lambda c: c.users_loss.held_in),
              ("held-out users", "o-", lambda c: c.users_loss.held_out),
              ("validation rows", "s--", lambda c: c.valid_nll))
    for label, style, value in series:
        ys = [value(c) for c in pts]
        if any(y is None for y in ys):
            continue
        line = ax.plot(epochs, ys, style, ms=3, label=label)
        if dp is not None and value(dp) is not None:  # the DP counterpart, hollow
            ax.plot([dp_x], [value(dp)], style[0], mfc="none", ms=4, color=line[0].get_color())
    ax.set_xscale("log", base=2)
    ax.set_xticks(epochs + [dp_x], [str(e) for e in epochs] + ["DP"])
    ax.set_xlabel(f"epochs (q T); DP: the last checkpoint's steps at {dp_label}", fontsize=8)
    ax.set_ylabel("loss (nats/token)", fontsize=8)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6)


def _series(ax, own: dict, epochs: list, dp_x: float, style: str, dodge: float = 1.0, **kw) -> None:
    """One instrument's rows by checkpoint (``own``: checkpoint -> row) against epochs with their 95% intervals
    (the row's measure and its interval), the DP counterpart hollow at ``dp_x``."""
    keys = [e for e in epochs if e in own] + (["dp"] if "dp" in own else [])
    xs = [(dp_x if e == "dp" else e) * dodge for e in keys]
    ys = [own[e].measure for e in keys]
    cis = [(own[e].auroc_ci95 if isinstance(own[e], AurocRow) else own[e].ci95) or (y, y) for e, y in zip(keys, ys)]
    lo, hi = [y - c[0] for y, c in zip(ys, cis)], [c[1] - y for y, c in zip(ys, cis)]
    n = len(keys) - ("dp" in own)
    bars = ax.errorbar(xs[:n], ys[:n], yerr=[lo[:n], hi[:n]], fmt=style, capsize=2, lw=1, **{"ms": 3, **kw})
    if "dp" in own:
        ax.errorbar(xs[n:], ys[n:], yerr=[lo[n:], hi[n:]], fmt=style[0], mfc="none", ms=4, capsize=2,
                    color=bars[0].get_color())


def _vmr_panel(ax, ex: Experiment, epochs: list, dp_x: float) -> None:
    """VMR minus the base model's of the trained secrets and of the held-out control against epochs, with their 95%
    intervals, the DP counterpart hollow at ``dp_x``."""
    for arm, style in (("trained", "o-"), ("held_out", "s--")):
        own = {r.checkpoint: r for r in ex.rows if (r.instrument, r.pool) == ("vmr", arm)}
        if own:
            _series(ax, own, epochs, dp_x, style, label=POOLS[arm])
    ax.axhline(0.0, color="k", ls=":", lw=0.8)
    ax.set_title(f"{ex.dataset}: VMR of real secrets", fontsize=8)
    ax.set_ylabel("VMR minus base (95% CI)", fontsize=8)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6, loc="upper left")


def dose_plot(experiments: list[Experiment], dp_label: str, path, follow_up: list[Experiment] = ()) -> None:
    """A column per dataset; a row per pool (text rows, real users, canary users): each AUROC instrument against
    epochs with its 95% interval, the DP counterpart hollow at the right, and the power follow-up's rows of the same
    dataset and pool (``follow_up``: more units) as stars beside its checkpoint; a row for VMR where an experiment has
    it (trained secrets and the held-out control, minus the base model); the last row the loss of held-in and
    held-out users' attacker samples and of the validation rows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pools = [p for p in ("text", "users", "canary_users")
             if any(r.pool == p and isinstance(r, AurocRow) for e in experiments for r in e.rows)]
    names = list(dict.fromkeys(r.instrument for e in experiments for r in e.rows
                               if isinstance(r, AurocRow) and r.instrument != "blind"))
    colour = {n: plt.get_cmap("tab10")(i % 10) for i, n in enumerate(names)}
    vmr = any(r.instrument == "vmr" for e in experiments for r in e.rows)
    n_rows = len(pools) + vmr + 1
    fig, axes = plt.subplots(n_rows, len(experiments), figsize=(4.4 * len(experiments), 2.6 * (n_rows - 1) + 2),
                             squeeze=False, sharex="col")
    for j, ex in enumerate(experiments):
        epochs = [c.epochs for c in ex.checkpoints if not c.dp]
        dp_x = epochs[-1] * 1.7
        for i, pool in enumerate(pools):
            ax = axes[i][j]
            if not any(r.pool == pool and isinstance(r, AurocRow) for r in ex.rows):
                ax.set_axis_off()  # this dataset has no such pool (TOFU has no canary users)
                continue
            for k, name in enumerate(names):
                own = {r.checkpoint: r for r in ex.rows if (r.instrument, r.pool) == (name, pool)}
                if not own:
                    continue
                _series(ax, own, epochs, dp_x, "o-", dodge=1 + 0.03 * (k - len(names) / 2), color=colour[name],
                        label=name)
                more = {r.checkpoint: r for f in follow_up if f.dataset == ex.dataset for r in f.rows
                        if (r.instrument, r.pool) == (name, pool) and r.checkpoint != "dp"}
                if more:  # the follow-up: the same instrument with more units, right of its checkpoint
                    _series(ax, more, epochs, dp_x, "*", dodge=1.25 + 0.03 * (k - len(names) / 2),
                            color=colour[name], mec="k", mew=0.4, ms=7)
            ax.axhline(0.5, color="k", ls=":", lw=0.8)
            ax.set_ylim(0, 1.02)
            sizes = {f"{r.members} vs {r.non_members}" for f in follow_up if f.dataset == ex.dataset for r in f.rows
                     if r.pool == pool and isinstance(r, AurocRow)}
            ax.set_title(f"{ex.dataset}: {POOLS[pool]}" + (f" (stars: {FOLLOW_UP}, {', '.join(sorted(sizes))})"
                                                            if sizes else ""), fontsize=8)
            ax.grid(alpha=0.3)
            if j == 0:
                ax.set_ylabel("AUROC (95% CI)", fontsize=8)
                ax.legend(fontsize=6, loc="lower left", ncol=2)
        if vmr:
            if any(r.instrument == "vmr" for r in ex.rows):
                _vmr_panel(axes[-2][j], ex, epochs, dp_x)
            else:
                axes[-2][j].set_axis_off()
        _loss_panel(axes[-1][j], ex, epochs, dp_x, dp_label)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _rows_table(inp: Inputs, data: PositiveControlTable, power: PositiveControlTable | None) -> tuple[Table, list]:
    """A row per dataset, instrument and pool: the default run's value, the profile's strongest checkpoint, the DP
    counterpart's and the power follow-up's; and the profile's experiments in words."""
    t = Table(["dataset", "instrument", "pool", "measure", "default run", "memorising profile (strongest checkpoint)",
               "DP counterpart (accountant ε)", f"{FOLLOW_UP}: last checkpoint, more units (members vs non-members)"])
    notes = []
    follow = {(ex.dataset, r.instrument, r.pool): r for ex in (power.experiments if power else [])
              for r in ex.rows if r.checkpoint != "dp"}
    shown = set()
    for ex in data.experiments:
        run, defaults = default_rows(inp.runs, ex.dataset)
        keys = list(dict.fromkeys((r.instrument, r.pool) for r in ex.rows))
        for instrument, pool in keys:
            own = [r for r in ex.rows if (r.instrument, r.pool) == (instrument, pool)]
            mem = [r for r in own if r.checkpoint != "dp"]
            best = max(mem, key=lambda r: r.measure) if mem else None
            dp = next((r for r in own if r.checkpoint == "dp"), None)
            default = defaults.get((instrument, pool))
            at = ("model-free: the same at every checkpoint" if instrument == "blind" else
                  f"at {best.checkpoint} epoch{'s' if best.checkpoint != 1 else ''}") if best else ""
            shown.add((ex.dataset, instrument, pool))
            t.rows.append([ex.dataset, instrument, POOLS.get(pool, pool), MEASURE.get(instrument, "AUROC"),
                           f"{_shown(default)} ({run})" if default else "–",
                           f"{_shown(best)} {at}" if best else "–",
                           f"{_shown(dp)} (ε {fmt(dp.epsilon, 2)})" if dp else "–",
                           _counted(follow.get((ex.dataset, instrument, pool)))])
        notes.append(_experiment_words(ex))
    for (dataset, instrument, pool), row in follow.items():  # what only the follow-up measured (AIR on TOFU)
        if (dataset, instrument, pool) not in shown:
            run, defaults = default_rows(inp.runs, dataset)
            default = defaults.get((instrument, pool))
            t.rows.append([dataset, instrument, POOLS.get(pool, pool), MEASURE.get(instrument, "AUROC"),
                           f"{_shown(default)} ({run})" if default else "–", "–", "–", _counted(row)])
    return t, notes


def _verdicts_table(data: PositiveControlTable, power: PositiveControlTable | None) -> Table:
    """A row per stated prediction of each design, with its verdict and the checks that fail."""
    v = Table(["design", "prediction (stated before the runs)", "verdict", "checks that hold"])
    for name, table in (("memorising profile", data), (FOLLOW_UP, power)):
        for p in (table.verdicts if table else []):
            failed = [c for c in p.checks if not c.holds]
            detail = "; ".join(f"{c.experiment}: {c.what} = {fmt(c.value, 3)}" for c in failed[:4])
            v.rows.append([name, p.says, p.verdict.value, f"{p.of - p.failed} of {p.of}"
                           + (f" (fails: {detail}{'; …' if len(failed) > 4 else ''})" if failed else "")])
    return v


def positive_control_section(inp: Inputs) -> Section | None:
    path = inp.positive_control
    if path is None or not path.is_file():
        return None
    data = read_table(path)
    power = _power(inp)
    design = data.design
    t, notes = _rows_table(inp, data, power)
    v = _verdicts_table(data, power)
    images = []
    if data.experiments:
        png = inp.plots_dir / "positive_control.png"
        dp_label = f"({design.dp['epsilon']:g}, {design.dp['delta']:g})" if design.dp else "no DP counterpart"
        dose_plot(data.experiments, dp_label, png, power.experiments if power else [])
        images.append(("Dose-response: each membership instrument's AUROC against epochs on the memorising profile, "
                       f"the DP counterpart at the right, the {FOLLOW_UP}'s values (more units) as stars beside its "
                       "checkpoint; VMR of the trained secrets and of the held-out control "
                       "(minus the base model) where measured; below, the loss of held-in and held-out users' "
                       "attacker samples and of the validation rows", png))
    r = design.recipe
    recipe = (f"{'full fine-tuning' if r['paradigm'] == 'full' else r['paradigm']}, {r['optimizer']} at lr "
              f"{r['lr']:g}, {'no canaries' if not r['canaries'] else 'with canaries'}")
    dp_words = (f"on its DP counterpart at (ε, δ) = ({design.dp['epsilon']:g}, {design.dp['delta']:g}) with the last "
                "checkpoint's q and steps" if design.dp else "without a DP counterpart")
    paragraphs = [
        "A null is evidence only if the instrument would have seen leakage where there is some. Each instrument below "
        "runs on the same pools as the default run, on non-DP fine-tunes trained until they memorise (the memorising "
        f"profile: {recipe}; a run per checkpoint at {', '.join(map(str, design.epochs))} epochs from the base "
        f"model, seed {design.seed}) and {dp_words}. The profile's column shows its "
        "strongest checkpoint, chosen after the fact (a description, not a test); the predictions' verdicts below are "
        "the tests, stated in studies.yaml before any run. Each interval is a 95% bootstrap interval read on its own "
        "(no correction over rows); where a side has fewer than audit.min_per_side items the exact permutation p "
        "stands instead. The canary audit has its own positive control (the non-DP run's row in the audit table).",
        f"Design committed at `{(data.design_commit or '?')[:10]}`; recipe {data.recipe}. Experiments: "
        + ("; ".join(notes) if notes else "none recorded yet: nothing here is a measurement") + "."]
    if power is not None:
        paragraphs.append(_power_words(power))
    return Section("Can the instruments see? The positive control", tables=[t, v] if data.experiments else [],
                   images=images, paragraphs=paragraphs)


def _power_words(power: PositiveControlTable) -> str:
    """The follow-up's design and experiments in words: what it changed, its seed, commit and time."""
    d = power.design
    parts = [_experiment_words(ex) for ex in power.experiments]
    units = "; ".join(f"{name}: {', '.join(spec['attacks'])}" for name, spec in d.datasets.items())
    return (f"The {FOLLOW_UP} (studies.yaml positive_control_power, committed at "
            f"`{(power.design_commit or '?')[:10]}` before its runs) was written after the profile's runs, whose "
            "intervals for user inference and VMR were too wide to tell: the same recipe at "
            f"{', '.join(map(str, d.epochs))} epochs with more units, seed {d.seed} "
            f"({'no DP counterpart' if not d.dp else 'with its DP counterpart'}), instruments per dataset: {units}. "
            "Its column gives the sizes each value stands on; its pools are not the default run's (more users, "
            "another draw), so it is compared with chance, not with the default run's value. Experiments: "
            + ("; ".join(parts) if parts else "none recorded yet: nothing in its column is a measurement") + ".")


def null_wording(inp: Inputs, instruments: tuple[str, ...]) -> list[str]:
    """Per default run and pool whose ``instruments`` see nothing (each interval covers chance): a sentence naming
    what the same instruments reach on the memorising profile (reports/positive_control.json) or its power follow-up
    (more units: reports/positive_control_power.json) where the profile's strongest checkpoint cannot tell, so a null
    reads as "at this recipe", not "the instrument is blind". Nothing without the profile's table."""
    path = inp.positive_control
    if path is None or not path.is_file():
        return []
    out = []
    power = _power(inp)
    extra = {}  # dataset -> the follow-up's rows (more units at the last checkpoint)
    for ex in (power.experiments if power else []):
        extra.setdefault(ex.dataset, []).extend(ex.rows)
    for ex in read_table(path).experiments:
        run, defaults = default_rows(inp.runs, ex.dataset)
        by_pool: dict[str, list[str]] = {}
        blind_too: dict[str, list[str]] = {}  # the profile's strongest checkpoint covers chance as well
        for (instrument, pool), row in defaults.items():
            if instrument not in instruments or instrument == "blind" or not row.covers_chance():
                continue
            mem = [r for r in ex.rows if (r.instrument, r.pool) == (instrument, pool) and r.checkpoint != "dp"]
            more = [r for r in extra.get(ex.dataset, []) if (r.instrument, r.pool) == (instrument, pool)]
            best = _strongest(mem, more)
            if best is not None:
                unit = "epoch" if best.checkpoint == 1 else "epochs"
                where = f" ({FOLLOW_UP}, {_sizes(best)})" if any(best is r for r in more) else ""
                said = f"{instrument} {_shown(row)} here, {_shown(best)} there at {best.checkpoint} {unit}{where}"
                sees = best.sees()
                (by_pool if sees else blind_too).setdefault(pool, []).append(said)
        for pool, said in by_pool.items():
            out.append(f"Run {run}, {POOLS.get(pool, pool)}: no leakage seen at this recipe; the same instruments "
                       f"on the memorising profile (on the same pools unless the {FOLLOW_UP} is named; section "
                       f"\"Can the instruments see?\"): " + "; ".join(said) + ".")
        for pool, said in blind_too.items():
            out.append(f"Run {run}, {POOLS.get(pool, pool)}: no leakage seen at this recipe, and none by these "
                       "instruments on the memorising profile either, so at this pool's size their null is not "
                       "evidence of no leakage: " + "; ".join(said) + ".")
    return out
