"""The variance sweep's grid (empirical-privacy-variance sections 3-5): one point per (epsilon, b, T, eta, seed),
each a single DP fine-tune named ``RUN`` whose sigma the accountant calibrates to the point's epsilon; the params a
point runs with; and the rule that turns a finished point into a failure (divergent training). Read by
flows/variance.py, which only dispatches the points and collects them."""
from __future__ import annotations

import copy
import itertools
from pathlib import Path

from ..shared.core.params import section_of
from ..shared.datasets import dataset_names, secrets_of
from .params import SweepParams

#: the run name every point's experiment trains, attacks and audits
RUN = "point"


def fmt_num(x: float) -> str:
    return f"{x:g}".replace(".", "p").replace("-", "m")


def points(sp: SweepParams) -> list[dict]:
    """Every (epsilon, b, T, eta, seed) of the grid, each with its experiment name and its params overrides."""
    out = []
    for eps, b, t, lr, seed in itertools.product(sp.epsilons, sp.grid.batch_size, sp.grid.steps, sp.grid.lr,
                                                 sp.seeds):
        name = f"{sp.name}-e{fmt_num(eps)}-b{b}-t{t}-lr{fmt_num(lr)}-s{seed}"
        dp = {"enabled": True, "epsilon": float(eps), "delta": sp.delta}
        run = {**sp.run, "batch_size": int(b), "steps": int(t), "lr": float(lr), "seed": int(seed), "dp": dp}
        out.append({"point": name, "epsilon": float(eps), "batch_size": int(b), "steps": int(t), "lr": float(lr),
                    "seed": int(seed), "runs": {RUN: run}, "attacks": list(sp.attacks)})
    return out


def point_params(raw: dict, point: dict) -> dict:
    """The whole params of ``point``: ``raw`` with `runs` = its one run (naming its dataset's secrets where the design
    does not), `attack.runs` = its attacks, its ``params``
    overrides (dotted keys), no guessing rule (`audit.primary.runs`) for a run the point drops, and no replicas or
    pooled test (``raw`` is left as it was)."""
    out = copy.deepcopy(raw)
    out["runs"] = copy.deepcopy(point["runs"])
    for run in out["runs"].values():  # its dataset's secrets file, as every run names it (derived, not designed);
        dataset = run.get("dataset") or section_of(out, "finetune.dataset")  # an unknown dataset: the check names it
        if dataset in dataset_names(out):
            run.setdefault("secrets", secrets_of(dataset, out))
    out.setdefault("attack", {})["runs"] = {run: list(point["attacks"]) for run in point["runs"]}
    for key, value in (point.get("params") or {}).items():  # a study point's own seeds (canaries.seed)
        *parents, leaf = key.split(".")
        node = out
        for k in parents:
            node = node.setdefault(k, {})
        node[leaf] = value
    rules = section_of(out, "audit.primary.runs")
    if isinstance(rules, dict):
        out["audit"]["primary"]["runs"] = {run: rule for run, rule in rules.items() if run in out["runs"]}
    if isinstance(section_of(out, "audit.pooled"), dict):
        out["audit"]["pooled"] = {}  # a point is one run: no replicas, no pooled test
    if isinstance(section_of(out, "replicas.sets"), dict):
        out["replicas"]["sets"] = {}
    return out


def apply_point(params_path: Path, point: dict) -> None:
    """Write the point's params over ``params_path`` (with PyYAML, so every float reads back as a float)."""
    import yaml

    raw = yaml.safe_load(params_path.read_text())
    params_path.write_text(yaml.safe_dump(point_params(raw, point), sort_keys=False))


def diverged(run: dict, limit: float) -> str | None:
    """Why a finished point counts as divergent training (validation loss not finite or above ``limit``)."""
    loss = (run.get("utility") or {}).get("valid_nll")
    try:
        ok = loss is not None and float(loss) <= limit
    except (TypeError, ValueError):
        ok = False
    return None if ok else f"diverged: validation loss {loss} > variance.sweep.diverged_loss = {limit:g}"


def study_points(study, raw: dict, primary_attack: str) -> list[dict]:
    """A pre-registered study's models (``variance.study`` or ``variance.silent``): one point per (configuration,
    seed), each the study's recipe (``runs.<study.run>``) at the configuration's b, T, eta (and optimizer, where it
    names one) with sigma calibrated to (epsilon, delta), and the
    seed as its own canary draw and membership coins (``canaries.seed``) and its text sample, sampler and noise (the
    run's ``seed``). Its attacks: the audit's primary attack and each Q2 score that is an attack (exposure, vmr,
    air, acr)."""
    base = copy.deepcopy(section_of(raw, f"runs.{study.run}") or {})
    attacks = [primary_attack] + [a for a in study.q2_against if a in ("exposure", "vmr", "air", "acr")]
    out = []
    for config, c in study.configs.items():
        for seed in study.seeds:
            dp = {**(base.get("dp") or {}), "enabled": True, "epsilon": float(study.epsilon),
                  "delta": float(study.delta)}
            run = {**base, "batch_size": int(c.batch_size), "steps": int(c.steps), "lr": float(c.lr),
                   "seed": int(seed), "dp": dp, **({"optimizer": c.optimizer} if hasattr(c, "optimizer") else {})}
            out.append({"point": f"study-{config}-s{seed}".replace("_", "-"), "config": config,
                        "epsilon": float(study.epsilon), "delta": float(study.delta), "batch_size": int(c.batch_size),
                        "steps": int(c.steps), "lr": float(c.lr), "seed": int(seed), "runs": {study.run: run},
                        "attacks": attacks, "params": {"canaries.seed": int(seed)}})
    return out
