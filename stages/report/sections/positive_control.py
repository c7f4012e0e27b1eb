"""Can the instruments see? (reports/positive_control.json, flows/positive_control.py): every instrument's measure on
the default run, on the memorising profile (non-DP full fine-tunes at each checkpoint) and on its DP counterpart, on
the same pools, with the predictions stated before the runs and their verdicts."""
from __future__ import annotations

import json

from ...audit.schema import instrument_rows
from ...shared.core.formatting import Table, ci, fmt
from ..inputs import Inputs
from ..render import Section

#: what each instrument's measure is, as the table names it
MEASURE = {"vmr": "VMR minus base", "eia": "token F1"}
POOLS = {"text": "text rows", "users": "real users", "canary_users": "canary users (Algorithm 1)",
         "trained": "trained secrets", "held_out": "held-out secrets (control)", "test": "unseen test texts"}


def _shown(row: dict | None) -> str:
    if row is None:
        return "–"
    if "auroc" in row:
        return ci(row["auroc"], row["auroc_ci95"], row["auroc_p_exact"])
    shown = fmt(row["value"], 3) if row["ci95"] is None else ci(row["value"], row["ci95"])
    if row["instrument"] == "eia":
        base = row.get("baseline")
        return shown + (f" (baseline {fmt(base, 3)})" if base is not None else " (no baseline recorded)")
    return shown


def _measure(row: dict) -> float:
    return row["auroc"] if "auroc" in row else row["value"]


def default_rows(runs: dict, dataset: str) -> tuple[str | None, dict]:
    """The default run on ``dataset`` without DP, and its rows by (instrument, pool), from this report's metrics."""
    run = next((r for r, m in runs.items() if m.get("dataset") == dataset and not m["privacy"]["dp"]), None)
    if run is None:
        return None, {}
    return run, {(x["instrument"], x["pool"]): x for x in instrument_rows(runs[run])}


def dose_plot(experiments: list[dict], path) -> None:
    """Per dataset: each AUROC instrument against epochs (95% intervals; the DP counterpart at the right, hollow),
    and below it the validation loss of held-in and held-out users."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(experiments), figsize=(4.6 * len(experiments), 6.4), squeeze=False,
                             sharex="col", gridspec_kw={"height_ratios": [2, 1]})
    for j, ex in enumerate(experiments):
        top, bottom = axes[0][j], axes[1][j]
        epochs = [c["epochs"] for c in ex["checkpoints"] if not c["dp"]]
        dp_x = epochs[-1] * 1.6
        series = sorted({(r["instrument"], r["pool"]) for r in ex["rows"] if "auroc" in r
                         and r["instrument"] != "blind" and r["pool"] in ("text", "users")})
        for i, (instrument, pool) in enumerate(series):
            pts = sorted(((r["checkpoint"] if r["checkpoint"] != "dp" else None), r) for r in ex["rows"]
                         if (r["instrument"], r["pool"]) == (instrument, pool) and r["checkpoint"] != "dp")
            xs = [x * (1 + 0.025 * (i - len(series) / 2)) for x, _ in pts]
            ys = [r["auroc"] for _, r in pts]
            err = [[y - (r["auroc_ci95"] or (y, y))[0] for y, (_, r) in zip(ys, pts)],
                   [(r["auroc_ci95"] or (y, y))[1] - y for y, (_, r) in zip(ys, pts)]]
            line = top.errorbar(xs, ys, yerr=err, fmt="o-", ms=3, capsize=2, lw=1,
                                label=f"{instrument} ({POOLS[pool]})")
            dp = next((r for r in ex["rows"] if (r["instrument"], r["pool"]) == (instrument, pool)
                       and r["checkpoint"] == "dp"), None)
            if dp is not None:
                lo, hi = dp["auroc_ci95"] or (dp["auroc"], dp["auroc"])
                top.errorbar([dp_x * (1 + 0.025 * (i - len(series) / 2))], [dp["auroc"]],
                             yerr=[[dp["auroc"] - lo], [hi - dp["auroc"]]], fmt="o", mfc="none", ms=4, capsize=2,
                             color=line[0].get_color())
        top.axhline(0.5, color="k", ls=":", lw=0.8)
        top.set_title(f"{ex['dataset']} (hollow, right: DP at the last checkpoint's steps)", fontsize=8)
        top.set_ylabel("AUROC (95% CI)")
        top.grid(alpha=0.3)
        top.legend(fontsize=6, loc="upper left")
        pts = [c for c in ex["checkpoints"] if not c["dp"]]
        for key, label in (("held_in", "held-in users"), ("held_out", "held-out users")):
            if all(c["users_loss"][key] is not None for c in pts):
                bottom.plot(epochs, [c["users_loss"][key] for c in pts], "o-", ms=3, label=label)
        bottom.plot(epochs, [c["valid_nll"] for c in pts], "s--", ms=3, label="validation rows")
        bottom.set_xscale("log", base=2)
        bottom.set_xticks(epochs + [dp_x], [str(e) for e in epochs] + ["DP"])
        bottom.set_xlabel("epochs (expected passes over each row, q T)")
        bottom.set_ylabel("loss (nats/token)")
        bottom.grid(alpha=0.3)
        bottom.legend(fontsize=6)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def positive_control_section(inp: Inputs) -> Section | None:
    path = inp.positive_control
    if path is None or not path.is_file():
        return None
    data = json.loads(path.read_text())
    design = data["design"]
    t = Table(["dataset", "instrument", "pool", "measure", "default run", "memorising profile (strongest checkpoint)",
               "DP counterpart (accountant ε)"])
    notes = []
    for ex in data["experiments"]:
        run, defaults = default_rows(inp.runs, ex["dataset"])
        keys = list(dict.fromkeys((r["instrument"], r["pool"]) for r in ex["rows"]))
        for instrument, pool in keys:
            own = [r for r in ex["rows"] if (r["instrument"], r["pool"]) == (instrument, pool)]
            mem = [r for r in own if r["checkpoint"] != "dp"]
            best = max(mem, key=_measure) if mem else None
            dp = next((r for r in own if r["checkpoint"] == "dp"), None)
            default = defaults.get((instrument, pool))
            t.rows.append([ex["dataset"], instrument, POOLS.get(pool, pool), MEASURE.get(instrument, "AUROC"),
                           f"{_shown(default)} ({run})" if default else "–",
                           f"{_shown(best)} at {best['checkpoint']} epochs" if best else "–",
                           f"{_shown(dp)} (ε {fmt(dp['epsilon'], 2)})" if dp else "–"])
        took = f"{ex['seconds'] / 60:.0f} min" if ex.get("seconds") else "time not recorded"
        notes.append(f"`{ex['experiment']}` (commit `{ex['commit'][:10]}`, {took} on the machine that ran it)")
    v = Table(["prediction (stated before the runs)", "verdict", "checks that hold"])
    for p in data.get("verdicts", []):
        failed = [c for c in p["checks"] if not c["holds"]]
        detail = "; ".join(f"{c['experiment']}: {c['what']} = {fmt(c['value'], 3)}" for c in failed[:4])
        v.rows.append([p["says"], p["verdict"], f"{p['of'] - p['failed']} of {p['of']}"
                       + (f" (fails: {detail}{'; …' if len(failed) > 4 else ''})" if failed else "")])
    images = []
    if data["experiments"]:
        png = inp.plots_dir / "positive_control.png"
        dose_plot(data["experiments"], png)
        images.append(("Dose-response: each membership instrument's AUROC against epochs on the memorising profile, "
                       "the DP counterpart at the right; below, the loss of held-in and held-out users' attacker "
                       "samples and of the validation rows", png))
    recipe = ", ".join(f"{k} {v}" for k, v in design["recipe"].items())
    return Section("Can the instruments see? The positive control", tables=[t, v] if data["experiments"] else [],
                   images=images, paragraphs=[
        "A null is evidence only if the instrument would have seen leakage where there is some. Each instrument below "
        "runs on the same pools as the default run, on non-DP fine-tunes trained until they memorise (the memorising "
        f"profile: {recipe}; a run per checkpoint at {', '.join(map(str, design['epochs']))} epochs from the base "
        f"model, seed {design['seed']}) and on its DP counterpart at (ε, δ) = ({design['dp']['epsilon']:g}, "
        f"{design['dp']['delta']:g}) with the last checkpoint's q and steps. The profile's column shows its "
        "strongest checkpoint, chosen after the fact (a description, not a test); the predictions' verdicts below are "
        "the tests, stated in studies.yaml before any run. Each interval is a 95% bootstrap interval read on its own "
        "(no correction over rows); where a side has fewer than audit.min_per_side items the exact permutation p "
        "stands instead. The canary audit has its own positive control (the non-DP run's row in the audit table).",
        f"Design committed at `{(data['design_commit'] or '?')[:10]}`; recipe {data['recipe']}. Experiments: "
        + ("; ".join(notes) if notes else "none recorded yet: nothing here is a measurement") + "."])


def _covers_chance(row: dict) -> bool:
    if "auroc" in row:
        if row["auroc_ci95"]:
            return row["auroc_ci95"][0] <= 0.5 <= row["auroc_ci95"][1]
        return row["auroc_p_exact"] is None or row["auroc_p_exact"] >= 0.05
    return row["ci95"] is None or row["ci95"][0] <= 0.0 <= row["ci95"][1]


def null_wording(inp: Inputs, instruments: tuple[str, ...]) -> list[str]:
    """Per default run and pool whose ``instruments`` see nothing (each interval covers chance): a sentence naming
    what the same instruments reach on the memorising profile (reports/positive_control.json), so a null reads as "at
    this recipe", not "the instrument is blind". Nothing without the profile's table."""
    path = inp.positive_control
    if path is None or not path.is_file():
        return []
    out = []
    for ex in json.loads(path.read_text())["experiments"]:
        run, defaults = default_rows(inp.runs, ex["dataset"])
        by_pool: dict[str, list[str]] = {}
        for (instrument, pool), row in defaults.items():
            if instrument not in instruments or instrument == "blind" or not _covers_chance(row):
                continue
            mem = [r for r in ex["rows"] if (r["instrument"], r["pool"]) == (instrument, pool)
                   and r["checkpoint"] != "dp"]
            if mem:
                best = max(mem, key=_measure)
                by_pool.setdefault(pool, []).append(f"{instrument} {_shown(row)} here, {_shown(best)} there at "
                                                    f"{best['checkpoint']} epochs")
        for pool, said in by_pool.items():
            out.append(f"Run {run}, {POOLS.get(pool, pool)}: no leakage seen at this recipe; the same instruments "
                       f"on the same pools of the memorising profile (section \"Can the instruments see?\"): "
                       + "; ".join(said) + ".")
    return out
