"""Tables comparing the audit metrics of several experiments (the sweep flow's reports/sweeps/<name>.md), built from
each experiment's flattened reports/metrics.json ({"runs.<run>.attacks.<attack>.<group>.auroc": ..., ...}).

The one-run bounds are found through the key helpers of ``audit.schema`` (``confidence_key``/``confidence_of``) at the
confidences each experiment's audit ran with, so a change of ``audit.primary.confidences`` changes the columns
instead of emptying them."""
from __future__ import annotations

import re

from ...audit.schema import NON_CANARY_GROUPS
from ...shared.bounds.keys import confidence_key, confidence_of, confidence_tag
from ...shared.core.formatting import Table, ci, fmt, md_table

#: where the flattened metrics record the confidences the audit ran with
CONFIDENCES = "audit_params.primary.confidences"


def primary_confidences(metrics: dict) -> list[float]:
    """audit.primary.confidences of one experiment's flattened metrics: as recorded, or (from `dvc exp show`, which
    keeps scalars only) as read back from its primary bounds' keys."""
    listed = metrics.get(CONFIDENCES)
    if isinstance(listed, list):
        return [float(c) for c in listed]
    found: list[float] = []
    for key in metrics:
        c = confidence_of(key) if ".audit_primary." in key else None
        if c is not None and c not in found:
            found.append(c)
    return found


def _union(lists) -> list[float]:
    out: list[float] = []
    for cs in lists:
        out += [c for c in cs if c not in out]
    return out


def default_keys(rows: list[dict]) -> list[str]:
    """The comparison's default metric suffixes: AUROC of two canary kinds and each experiment's headline bound (the
    first of its confidences)."""
    firsts = _union(primary_confidences(r["metrics"])[:1] for r in rows)
    return ["loss.new_token.auroc", "loss.random.auroc", *[f"audit_primary.{confidence_key(c)}" for c in firsts]]


def _with_ci(metrics: dict, base: str) -> str:
    """value [lo, hi] when the metrics carry the interval next to the value (x / x_ci95, or value / ci95)."""
    v, lo_hi = metrics.get(base), metrics.get(base + "_ci95") or metrics.get(base.rsplit(".", 1)[0] + ".ci95")
    return ci(v, lo_hi) if v is not None and isinstance(lo_hi, list) and len(lo_hi) == 2 else fmt(v)


def canary_table(rows: list[dict], sets: dict[str, list[str]], attack: str = "loss") -> str:
    """One line per (experiment, run, canary kind): TPR@1%FPR and AUROC with their 95% bootstrap intervals, and the
    run's pre-registered epsilon-hat (one column per confidence) on the line of the kind its primary test uses."""
    pat = re.compile(rf"^runs\.([^.]+)\.attacks\.{re.escape(attack)}\.([^.]+)\.auroc$")
    confidences = _union(primary_confidences(r["metrics"]) for r in rows)
    t = Table(["experiment", "params set", "run", "canary kind", "members / non-members", "TPR@1%FPR [95% CI]",
               "AUROC [95% CI]", "primary test", *[f"ε̂{confidence_tag(c)}" for c in confidences]])
    for r in rows:
        m = r["metrics"]
        for key in sorted(k for k in m if pat.match(k)):
            run, kind = pat.match(key).groups()
            if kind in NON_CANARY_GROUPS:
                continue
            b, p = f"runs.{run}.attacks.{attack}.{kind}", f"runs.{run}.audit_primary"
            primary = m.get(p + ".kind") == kind
            t.rows.append([r["experiment"], " ".join(sets.get(r["experiment"], [])), run, kind,
                           f"{fmt(m.get(b + '.members'))} / {fmt(m.get(b + '.non_members'))}",
                           _with_ci(m, b + ".tpr_at_fpr.0.01.value"), _with_ci(m, b + ".auroc"),
                           f"{m.get(p + '.attack')}, k₊={m.get(p + '.k_pos')}, k₋={m.get(p + '.k_neg')}" if primary
                           else "–", *[m.get(f"{p}.{confidence_key(c)}") if primary else None for c in confidences]])
    return md_table(t) if t.rows else ""


def table(rows: list[dict], sets: dict[str, list[str]], keys: list[str]) -> str:
    """One line per experiment: its commit, the params it set and every metric whose key ends with one of ``keys``."""
    t = Table(["experiment", "commit", "params set", *keys])
    for r in rows:
        vals = ["; ".join(fmt(v) for m, v in r["metrics"].items() if m.endswith(k)) or None for k in keys]
        t.rows.append([r["experiment"], f"`{(r['rev'] or '')[:8]}`", " ".join(sets.get(r["experiment"], [])), *vals])
    return md_table(t)


def sweep_markdown(name: str, baseline: str, rows: list[dict], sets: dict[str, list[str]],
                   keys: list[str] | None = None) -> str:
    """reports/sweeps/<name>.md: the comparison table and the canary table of the experiments ``rows``."""
    md = (f"# Sweep {name}\n\nDVC experiments derived from commit `{baseline[:8]}`.\n\n"
          + table(rows, sets, keys or default_keys(rows)) + "\n")
    kinds = canary_table(rows, sets)
    if kinds:
        md += ("\nLoss attack on the canaries of every run of every experiment (95% bootstrap intervals over members "
               "and non-members; ε̂ is each run's pre-registered test, audit.primary):\n\n" + kinds + "\n")
    return md
