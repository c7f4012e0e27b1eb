"""Params of ``reference@<set>`` (the ``reference`` section): RMIA's reference fine-tunes, one DVC stage each. The
attack stage reads them too (its RMIA scores a run against every set trained on the run's recipe); RMIA's own
correction ``a`` is the attack's (``attack.rmia_a``)."""
from __future__ import annotations

from dataclasses import dataclass

from ..shared.core.params import check, run_names


@dataclass(frozen=True)
class ReferenceSet:
    """One reference fine-tune for RMIA: the recipe of run ``run`` trained on population rows at ``seed``."""

    run: str
    seed: int

    def problems(self):
        return check(self.seed >= 0, "seed", "must be >= 0", self.seed)


@dataclass(frozen=True)
class ReferenceParams:
    #: data/references/<set>/ (a trained model and reference.json)
    out_dir: str
    #: set name -> {run, seed}; a run's RMIA uses every set trained on its recipe and dataset
    sets: dict[str, ReferenceSet]

    def relations(self, raw: dict) -> list[tuple[str, str]]:
        """Each set names a configured run and a seed of its own: not the run's (its references would draw the
        run's own random streams) and not another set's of that run (the two would be one model)."""
        names, out, used = run_names(raw), [], {}
        if names and set(names) <= set(((raw.get("replicas") or {}).get("sets") or {})):
            return []  # a replica's own point (core.replicas.replica_raw): one run, which no set names
        for k, ref in self.sets.items():
            if ref.run not in names:
                out.append((f"reference.sets.{k}.run", f"no such run (known: {', '.join(names)})"))
                continue
            own = ((raw.get("runs") or {}).get(ref.run) or {}).get("seed", (raw.get("finetune") or {}).get("seed"))
            if ref.seed == own or (ref.run, ref.seed) in used:
                other = used.get((ref.run, ref.seed), ref.run)
                out.append((f"reference.sets.{k}.seed", f"seed {ref.seed} is run {ref.run}'s own or set {other}'s"))
            used.setdefault((ref.run, ref.seed), k)
        return out
