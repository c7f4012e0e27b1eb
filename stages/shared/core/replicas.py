"""Replicas of a recipe for the pooled audit: the same run at other seeds, each a pipeline point of its own.

A replica ``replicas.sets.<name>: {run, seed}`` is the recipe ``runs.<run>`` trained again with everything random
drawn anew from ``seed``: its own canaries (draw and membership coins: ``canaries.seed``, the secret-sharer fills:
``canaries.formatted.seed``), its own text sample, sampler and noise (``finetune.seed``). Each canary is in one
replica only, so K replicas are one mechanism that is (eps, delta)-DP in each canary (parallel composition), and
one pre-registered test over the union of their canaries is a valid one-run audit (docs/method.md).

``replica_raw(raw, name)`` is the whole params mapping of that point: the replica's seeds, its own output
locations under ``replicas.out_dir/<name>/`` (checkpoints and timings under the run's name, as any run's) and one run
named ``<name>`` that scores only what the pooled test
reads (``replicas.attacks``). The canaries, finetune and attack stages run on it (``--replica <name>``; dvc.yaml
``replica_*@<name>``), so a replica is trained and scored by exactly the code of the run it repeats.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path

from .errors import ConfigError
from .params import PARAMS_FILE, build, check, deep_merge, section_of


@dataclass(frozen=True)
class Replica:
    """One replica: the recipe it repeats (a name in ``runs``) and the seed of everything it draws."""

    run: str
    seed: int

    def problems(self):
        return check(self.seed >= 0, "seed", "must be >= 0", self.seed)


@dataclass(frozen=True)
class ReplicaParams:
    """``replicas``: the replica sets of the pooled audits (``audit.pooled``)."""

    #: data/replicas/<name>/{canaries, reference_canaries.parquet, models, scores}
    out_dir: str
    #: the attacks each replica runs (the pooled tests' scores; nothing else is read)
    attacks: tuple[str, ...]
    #: whether a replica's canaries get the base model's reference log-probabilities (a forward pass over every
    #: canary; read by reference-calibrated attacks such as contrast_ref and whitebox, not by contrast); without
    #: them the reference file holds empty lists
    reference: bool
    sets: dict[str, Replica]

    def problems(self):
        return check(len(self.attacks) > 0, "attacks", "needs at least one attack", self.attacks)

    def relations(self, raw: dict) -> list[tuple[str, str]]:
        """Each replica repeats a configured run with canaries, trained here, at a seed no other replica of it and
        not the run itself uses (a repeated seed repeats the canary draw: the pooled test would count it twice)."""
        runs = raw.get("runs") or {}
        out: list[tuple[str, str]] = []
        primary = section_of(raw, "audit.primary.attack")
        if self.sets and primary not in self.attacks:
            out.append(("replicas.attacks", f"must include the primary attack {primary!r} (the pooled test scores it)"))
        used: dict[tuple[str, int], str] = {}
        for name, rep in self.sets.items():
            key = f"replicas.sets.{name}"
            if name in runs:
                out.append((key, f"a replica's name must not be a run's name ({name!r} is in runs)"))
                continue
            if rep.run not in runs:
                out.append((f"{key}.run", f"no such run (known: {', '.join(runs) or 'none'})"))
                continue
            merged = deep_merge(raw.get("finetune") or {}, runs[rep.run] or {})
            if not merged.get("canaries") or merged.get("external"):
                out.append((f"{key}.run", f"run {rep.run!r} has no canaries of its own training to replicate"))
                continue
            own = {section_of(raw, "canaries.seed"), merged.get("seed")}
            if rep.seed in own:
                out.append((f"{key}.seed", f"seed {rep.seed} is run {rep.run}'s own seed (canaries.seed or "
                                           f"runs.{rep.run}.seed): its canary draw would repeat"))
            elif (rep.run, rep.seed) in used:
                out.append((f"{key}.seed", f"seed {rep.seed} repeats replica {used[(rep.run, rep.seed)]} of run "
                                           f"{rep.run}: its canary draw would repeat"))
            used.setdefault((rep.run, rep.seed), name)
        return out


def load_replicas(raw: dict, path: str | Path = PARAMS_FILE) -> ReplicaParams:
    """``replicas`` validated, relations to ``runs`` included (errors name the key)."""
    try:
        params = build(ReplicaParams, raw.get("replicas"), "replicas")
        for key, msg in params.relations(raw):
            raise ConfigError(f"{key}: {msg}")
        return params
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def replicas_of(params: ReplicaParams, run: str) -> list[str]:
    """The replica names of ``run``, in params order."""
    return [name for name, rep in params.sets.items() if rep.run == run]


def replica_raw(raw: dict, name: str, path: str | Path = PARAMS_FILE) -> dict:
    """The params mapping of replica ``name`` as a pipeline point of its own (see the module doc)."""
    params = load_replicas(raw, path)
    if name not in params.sets:
        raise ConfigError(f"{path}: replicas.sets.{name}: no such replica (known: {', '.join(params.sets) or 'none'})")
    rep = params.sets[name]
    out = copy.deepcopy(raw)
    root = f"{params.out_dir}/{name}"
    can = out["canaries"]
    can.update(seed=rep.seed, out_dir=f"{root}/canaries", reference_out=f"{root}/reference_canaries.parquet")
    can["formatted"] = {**can["formatted"], "seed": rep.seed}
    can["users"] = {**can["users"], "enabled": False}  # canary users go to enron_users runs only
    # checkpoints and timings: by run name; no gradient diagnostics (auditor-side records the pooled test never
    # reads; they run on a forked RNG, so the training is the run's own either way)
    out["finetune"] = {**out["finetune"], "out_dir": f"{root}/models",
                       "diagnostics": {**out["finetune"]["diagnostics"], "gradient_canaries": 0}}
    out["runs"] = {name: {**copy.deepcopy(raw["runs"][rep.run] or {}), "seed": rep.seed}}
    out["attack"] = {**out["attack"], "out_dir": f"{root}/scores", "attacks": list(params.attacks),
                     "runs": {name: None}}
    primary = out.get("audit", {}).get("primary", {})
    if primary.get("runs"):
        primary["runs"] = {}  # the rules of other runs name runs this point does not have
    return out
