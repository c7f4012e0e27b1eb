"""The sweep table's rows (``schema.POINTS``) from the points and what became of them, and its Markdown view (the
flow's Prefect artifact). A point's epsilon-hat columns are read through the audit's key helpers, at the confidences
``audit.primary.confidences`` lists, so changing those never silently empties them."""
from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

from ..shared.bounds.keys import confidence_key, confidence_tag
from ..shared.core.formatting import Table, fmt, md_table
from ..shared.core.params import section_of
from .grid import diverged
from .schema import POINTS

#: the confidence of the ``eps_hat_99`` column (``eps_hat`` is at the first of audit.primary.confidences)
SECOND_CONFIDENCE = 0.99


def _num(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _bound(run: Mapping, confidence: float | None) -> float | None:
    return None if confidence is None else _num(section_of(run, "audit_primary." + confidence_key(confidence)))


def point_record(point: Mapping, run: Mapping | None, measure: str, status: str, error: str | None,
                 done: Mapping | None, confidences: Sequence[float]) -> dict:
    """One table row from a point's spec and (completed) its run's entry of the experiment's metrics.json;
    ``confidences``: audit.primary.confidences (``eps_hat`` at the first, ``eps_hat_99`` at 0.99 where listed)."""
    row = {f: None for f in POINTS.names}
    row.update({k: point[k] for k in ("point", "epsilon", "batch_size", "steps", "lr", "seed")})
    row.update(status=status, error=error, measure=measure, rev=(done or {}).get("rev"))
    if run is None:
        return row
    priv, mem = run.get("privacy") or {}, section_of(run, f"memorization.{measure}.trained") or {}
    control = (section_of(run, f"memorization.{measure}.untrained") or {}
               if section_of(run, f"memorization.{measure}.randomised") else {})
    nll = _num(section_of(run, "utility.valid_nll"))
    row.update(valid_loss=nll, utility=-nll if nll is not None else None, eps_spent=_num(priv.get("epsilon_spent")),
               delta=_num(priv.get("delta")), sigma=_num(priv.get("noise_multiplier")),
               sample_rate=_num(priv.get("sample_rate")), score_mean=_num(mem.get("minus_base")),
               score_max=_num(mem.get("max_minus_base")), secrets=mem.get("secrets"),
               control_mean=_num(control.get("minus_base")),
               eps_hat=_bound(run, confidences[0] if confidences else None),
               eps_hat_99=_bound(run, SECOND_CONFIDENCE if SECOND_CONFIDENCE in confidences else None),
               exposure=_num(section_of(run, "exposure.all.mean_exposure_inserted")),
               profile=[{"delta": float(d["delta"]), "epsilon": float(d["epsilon"])}
                        for d in priv.get("profile") or []])
    return row


def tabulate(pts: list[dict], done: Mapping[str, Mapping], failed: Mapping[str, str],
             read_run: Callable[[str], Mapping], measure: str, diverged_loss: float,
             confidences: Sequence[float]) -> list[dict]:
    """One row per point, in grid order: a completed point from its run's metrics (``read_run(rev)``; a divergent run
    is recorded as failed, with its experiment), any other as failed with its error."""
    rows = []
    for p in pts:
        name = p["point"]
        if name in done:
            run = read_run(done[name]["rev"])
            why = diverged(run, diverged_loss)
            rows.append(point_record(p, run, measure, "failed" if why else "completed", why, done[name], confidences))
        else:
            rows.append(point_record(p, None, measure, "failed", failed.get(name, "not run"), None, confidences))
    return rows


def markdown(rows: list[dict], name: str, rev: str, confidences: Sequence[float]) -> str:
    """The sweep table as the flow's Prefect artifact."""
    tag = confidence_tag(confidences[0])
    t = Table(["point", "status", "ε", "b", "T", "η", "seed", "valid loss", "ε spent", "σ", "score mean", "score max",
               f"ε̂{tag}", "exposure", "experiment"])
    for r in rows:
        status = r["status"] if r["status"] == "completed" else f"FAILED: {r.get('error') or ''}"[:160]
        t.rows.append([r["point"], status, r["epsilon"], r["batch_size"], r["steps"], fmt(r["lr"], 4),
                       r["seed"], r["valid_loss"], r["eps_spent"], r["sigma"], r["score_mean"], r["score_max"],
                       r["eps_hat"], r["exposure"], f"`{r['rev'][:8]}`" if r["rev"] else None])
    return (f"# Variance sweep {name}\n\nPoints from commit `{rev[:8]}`; each is a DVC experiment (`dvc exp show`, "
            f"`dvc exp apply <point>`).\n\n{md_table(t)}\n")


def study_record(point: Mapping, run: Mapping | None, status: str, error: str | None, done: Mapping | None,
                 base_commit: str) -> dict:
    """One row of the study's table (``schema.AUDIT_POINTS``) from a model's point and (completed) its run's entry of
    the experiment's metrics.json: the primary test, its ideal, the member shift of the primary attack, utility
    and exposure."""
    from .schema import AUDIT_POINTS

    row = {f: None for f in AUDIT_POINTS.names}
    row.update({k: point[k] for k in ("point", "config", "seed", "epsilon", "delta", "steps", "batch_size", "lr")})
    row.update(status=status, error=error, base_commit=base_commit, rev=(done or {}).get("rev"))
    if run is None:
        return row
    priv, prim = run.get("privacy") or {}, run.get("audit_primary") or {}
    shift = section_of(run, f"canary_response.attacks.{prim.get('attack')}.member_shift")
    row.update(accountant_epsilon=_num(priv.get("epsilon_spent")), sample_rate=_num(priv.get("sample_rate")),
               noise_multiplier=_num(priv.get("noise_multiplier")), delta=_num(priv.get("delta")),
               m=prim.get("m"), r=prim.get("r"), v=prim.get("v"), k_pos=prim.get("k_pos"), k_neg=prim.get("k_neg"),
               seed_status=prim.get("seed_status"),
               eps_lb_95=_num(prim.get("eps_lb_95")), gdp_eps_lb_95=_num(prim.get("gdp_eps_lb_95")),
               member_shift=_num(shift), ideal_eps_lb_95_median=_num(prim.get("ideal_eps_lb_95_median")),
               valid_perplexity=_num(section_of(run, "utility.valid_perplexity")),
               exposure=_num(section_of(run, "exposure.all.mean_exposure_inserted")),
               exposure_control=_num(section_of(run, "exposure.all.mean_exposure_not_inserted")))
    return row
