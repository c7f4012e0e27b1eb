"""Assemble the report from reports/metrics.json, the score tables, data stats and dvc.lock."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import lineage as lin
from .render import Section, Table, ci, fmt, to_html, to_markdown


def _flatten(prefix: str, obj: Any, out: dict) -> None:
    if isinstance(obj, dict):
        for k, v in obj.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        out[prefix] = obj


def _short(md5: str | None) -> str:
    return (md5 or "?")[:8]


def number_lineage(metrics: dict, lock: dict, git: dict, verified: bool) -> dict:
    """metrics.json path -> where it came from (producing stage, its inputs' md5, params, chain)."""
    audit = lin.stage_record(lock, "audit")
    flat: dict = {}
    _flatten("", metrics.get("runs", {}), flat)
    out = {}
    for path, value in flat.items():
        run = path.split(".")[0]
        chain = [f"attack@{run}"] + lin.upstream(lock, f"attack@{run}")  # audit reads this run's scores only
        out[f"runs.{path}"] = {
            "value": value,
            "stage": "audit",
            "inputs": {d["path"]: d["md5"] for d in (audit or {}).get("deps", [])},
            "params": (audit or {}).get("params", {}),
            "upstream": chain,
            "git_commit": git.get("commit"),
            "git_dirty": git.get("dirty"),
            "lock_verified": verified,
        }
    return out


def build_sections(metrics: dict, scores_dir: Path, processed_dir: Path, secrets_dir: Path, lock: dict, git: dict,
                   plots_dir: Path, out_dir: Path) -> tuple[list[Section], dict]:
    import numpy as np

    from ..auditing.roc import roc_curve
    from ..data.schemas import SCORES, SECRETS, STATS
    from ..io import read_json, read_table, write_json
    from .plots import privacy_plot, roc_plot, roc_points

    verified = lin.verify_outputs(lock, "audit")
    lineage = number_lineage(metrics, lock, git, verified)
    ap = metrics.get("audit_params", {})
    runs = metrics.get("runs", {})

    # ------------------------------------------------------------------ summary
    base = next((read_json(scores_dir / r / "run.json").get("base_model", {}) for r in runs), {})
    summary = Section("Summary", paragraphs=[
        f"Git commit `{git.get('commit') or 'unknown'}`" + (" (working tree dirty)" if git.get("dirty") else "")
        + f"; dvc.lock {'matches' if verified else 'does NOT match'} reports/metrics.json"
        + ("" if verified else " — these numbers are not traceable to a recorded DVC run") + ".",
        f"Base model: `{base.get('name_or_path', '?')}` ({base.get('architecture', '?')}, "
        f"{fmt(base.get('num_parameters'))} parameters"
        + (f", GGUF sha256 `{base['sha256'][:16]}…`" if base.get("sha256") else "") + ").",
        "Canaries are **synthetic**: random-token prefixes with a secret of the stated kind, each a member "
        "with probability 1/2 (seeded), inserted into **real** PersonaChat dialogue rows (ConvAI2 validation "
        "dialogues split by dialogue into train/valid/test, since the train split is not available offline).",
        f"One-run audit (Steinke et al. 2023): the {ap.get('k_pos')} highest-scoring canaries are guessed "
        f"\"in\" and the {ap.get('k_neg')} lowest \"out\"; ε̂ is the largest ε whose (ε, δ)-DP "
        "null hypothesis is rejected at the stated confidence, with δ = "
        + (f"{ap['delta']:g} for every run" if ap.get("delta") is not None else
           f"the run's own δ for DP runs (so ε̂ and the accountant's ε are at the same δ) and "
           f"{ap.get('fallback_delta', 0):g} for runs without DP") + ". The numbers of guesses are fixed in params (no "
        "sweep, so no multiple-testing correction is needed). AUROC and TPR intervals: 95% stratified "
        f"bootstrap over members and non-members ({ap.get('bootstrap')} resamples). TPR at FPR x is the best "
        "TPR at an empirical FPR ≤ x (no interpolation).",
    ])

    # ------------------------------------------------------------------ audit + MIA table
    res = Table(["run", "accountant ε (δ)", "audit δ", "attack", "canary kind", "m (members)", "guesses r → correct v",
                 "ε̂ 95%", "ε̂ 99%", "AUROC [95% CI]", "TPR@0.1%FPR", "TPR@1%FPR [95% CI]", "TPR@5%FPR",
                 "inputs (audit deps md5)"])
    audit_rec = lin.stage_record(lock, "audit") or {"deps": []}
    deps_md5 = ", ".join(f"{d['path']}:{_short(d['md5'])}" for d in audit_rec["deps"] if d["path"].startswith("data/scores"))
    images = []
    plot_json: dict = {}
    for run, r in runs.items():
        pv = r["privacy"]
        acct = (f"{fmt(pv.get('epsilon_spent'))} ({pv.get('accountant')}, δ={pv.get('delta'):.2g})"
                if pv.get("dp") else "∞ (no DP)")
        for atk, kinds in r["attacks"].items():
            curves = {}
            table = read_table(scores_dir / run / f"{atk}.parquet", SCORES)
            kcol = table.column("kind").to_pylist()
            for kind, m in kinds.items():
                a = m["audit"]
                t = m["tpr_at_fpr"]
                g = lambda f, t=t: t.get(f, {})  # noqa: E731
                res.rows.append([
                    run, acct, f"{a['delta']:.2g}", atk, kind, f"{a['m']} ({m['members']})", f"{a['r']} → {a['v']}",
                    a.get("eps_lb_95"), a.get("eps_lb_99"), ci(m["auroc"], m["auroc_ci95"]),
                    g("0.001").get("value"), ci(g("0.01").get("value", float("nan")), g("0.01").get("ci95", (None, None))),
                    g("0.05").get("value"), deps_md5,
                ])
                sel = np.asarray([k == kind for k in kcol])
                fpr, tpr = roc_curve(table.column("score").to_numpy()[sel],
                                     np.asarray(table.column("member").to_pylist(), dtype=bool)[sel])
                curves[kind] = (fpr, tpr, m["auroc"])
            png = plots_dir / f"roc_{run}_{atk}.png"
            roc_plot(curves, f"run {run}, attack {atk}", png)
            plot_json[f"roc_{run}_{atk}"] = roc_points(curves)
            images.append((f"ROC of the {atk} attack on run {run}, one curve per canary kind", png))
            if pv.get("dp") and pv.get("profile"):
                best = max((m["audit"].get("eps_lb_95", 0.0) for m in kinds.values()), default=0.0)
                png = plots_dir / f"privacy_{run}_{atk}.png"
                privacy_plot(pv["profile"], curves, pv["epsilon_spent"], pv["delta"], best or None,
                             f"run {run}: accountant ε = {pv['epsilon_spent']:.2f} vs audit ε̂95 = {best:.2f}", png)
                images.append((f"Run {run}: the accountant's privacy profile, and the {atk} attack's ROC inside the "
                               f"(ε, δ) privacy region (dashed: the region at the audited ε̂)", png))
    for name, pts in plot_json.items():
        write_json(plots_dir / f"{name}.json", pts)
    results = Section("Audit and membership inference on canaries", tables=[res], images=images)

    # ------------------------------------------------------------------ training / utility
    tr = Table(["run", "DP", "σ", "C", "q", "steps T", "expected exposures q·T", "examples n",
                "valid perplexity", "train seconds"])
    for run, r in runs.items():
        pv, t = r["privacy"], r["training"]
        tr.rows.append([run, pv.get("dp"), pv.get("noise_multiplier"), pv.get("max_grad_norm"), t["sample_rate"],
                        t["steps"], t["expected_exposures_per_member"], t["n_examples"],
                        r["utility"]["valid_perplexity"], t["train_seconds"]])
    training = Section("Training, privacy accounting and utility", tables=[tr], paragraphs=[
        "Poisson sampling at rate q per step; DP runs use opacus DP-SGD (per-example clipping at C, Gaussian "
        "noise σ·C, σ calibrated so the accountant spends the target ε at δ). Validation perplexity is on "
        "held-out PersonaChat replies (loss on the reply tokens only)."])

    # ------------------------------------------------------------------ data
    data = Section("Data", paragraphs=[
        "Counts after each preprocessing step, per dataset (the source path is the one dvc.lock recorded; "
        "`data/raw/...` = the small real samples vendored in the repository, not the full corpora)."])
    for ds_dir in sorted(p for p in processed_dir.iterdir() if (p / "stats.parquet").is_file()) if processed_dir.is_dir() else []:
        st = read_table(ds_dir / "stats.parquet", STATS).to_pylist()
        rec = lin.stage_record(lock, f"preprocess@{ds_dir.name}") or {"params": {}}
        src = (rec["params"].get(f"preprocess.datasets.{ds_dir.name}") or {}).get("path", "?")
        data.tables.append(Table([f"{ds_dir.name} ({src}): step", "count"], [[s["step"], s["count"]] for s in st]))

    # ------------------------------------------------------------------ data contracts (GX)
    contracts = Section("Data contracts (Great Expectations)", paragraphs=[
        "Every processed dataset is checked against its pyarrow schema and a Great Expectations suite before "
        "it is written; a violation fails its stage. Observed values are aggregates (no row contents)."])
    ct = Table(["dataset", "suite", "expectation", "column", "observed", "ok"])
    for ds_dir in sorted(p for p in processed_dir.iterdir() if (p / "gx_results.json").is_file()) if processed_dir.is_dir() else []:
        for suite, rep in read_json(ds_dir / "gx_results.json").items():
            for r in rep["results"]:
                obs = r.get("observed_value")
                if obs is None and r.get("unexpected_count") is not None:
                    obs = f"{r['unexpected_count']} of {r['element_count']} unexpected"
                ct.rows.append([ds_dir.name, suite, r["expectation"], r["kwargs"].get("column", ""), obs, r["success"]])
    contracts.tables.append(ct)

    # ------------------------------------------------------------------ secrets
    secrets_sec = Section("Real secrets in the training data", paragraphs=[
        "Secrets extracted from the training splits (values are not shown). `base reproduces` = the base model "
        "already continues the prompt with the secret greedily, i.e. leakage that fine-tuning did not cause; "
        "later memorization metrics subtract it."])
    stt = Table(["dataset", "kind", "secrets", "mean occurrences", "base reproduces", "mean base log-prob"])
    for f in sorted(secrets_dir.glob("*.parquet")) if secrets_dir.is_dir() else []:
        t = read_table(f, SECRETS).to_pandas()
        for kind, g in t.groupby("kind"):
            stt.rows.append([f.stem, kind, len(g), float(g["occurrences"].mean()),
                             f"{int(g['base_greedy'].fillna(False).sum())} / {len(g)}",
                             float(g["base_logprob"].mean()) if g["base_logprob"].notna().any() else None])
    secrets_sec.tables.append(stt)

    # ------------------------------------------------------------------ lineage
    stages = ["audit"] + lin.upstream(lock, "audit")
    lt = Table(["stage", "params read", "inputs (path: md5)", "outputs (path: md5)"])
    for s in stages:
        rec = lin.stage_record(lock, s)
        if rec is None:
            continue
        params = ", ".join(f"{k}" for k in rec["params"]) or "–"
        lt.rows.append([s, params, "; ".join(f"{d['path']}: {_short(d['md5'])}" for d in rec["deps"]),
                        "; ".join(f"{o['path']}: {_short(o['md5'])}" for o in rec["outs"])])
    lineage_sec = Section("Lineage", tables=[lt], paragraphs=[
        "Every number above is in `reports/metrics.json` (written by the `audit` stage); "
        "`reports/lineage.json` maps each of its JSON paths to the producing stage, the md5 of that stage's "
        "inputs and its params as recorded in dvc.lock, the upstream stages and the git commit. "
        "The table lists each stage in the chain as dvc.lock records it (md5 prefixes; `.dir` = directory)."])
    return [summary, results, training, data, contracts, secrets_sec, lineage_sec], lineage


def build_report(title: str, metrics_path: Path, scores_dir: Path, processed_dir: Path, secrets_dir: Path,
                 lock_path: Path, out_dir: Path, root: Path = Path(".")) -> dict:
    from ..io import atomic_file, read_json, write_json

    metrics = read_json(metrics_path)
    lock = lin.load_lock(lock_path)
    git = lin.git_state(root)
    plots_dir = out_dir / "plots"
    sections, lineage = build_sections(metrics, scores_dir, processed_dir, secrets_dir, lock, git, plots_dir, out_dir)
    with atomic_file(out_dir / "report.md") as tmp:
        tmp.write_text(to_markdown(title, sections, out_dir))
    with atomic_file(out_dir / "index.html") as tmp:
        tmp.write_text(to_html(title, sections))
    write_json(out_dir / "lineage.json", lineage)
    return lineage
