"""The attack registry: each attack declares its family and what a run must provide for it.

Membership attacks reduce per-token log-probabilities, computed once per (model, example) by the
attack context and shared by every attack, to one score per item (higher = more likely a member):
canaries (each kind a group), real text samples ("text") or users ("users"). Memorization attacks
(VMR, AIR, ACR), exposure and embedding inversion produce their own tables. Asking for an attack on a
run that lacks what it needs is a one-line error naming what is missing.

What the audit and the report need to know of an attack is declared here, with it, and written with its scores
(``Attack.declared``, the attack record's ``attacks``): its family, its threat model (named beside its numbers),
the canary kinds on which it ranks canaries exactly as another attack does (``ranks_like``: one test for both in
the exploratory family; declared, never inferred from scores, and checked by the audit) and whether it is a
model-free baseline (a shift check, not a leakage number).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

from ..shared.core.registry import Registry


@dataclass(frozen=True)
class Attack:
    name: str
    family: str  # membership | exposure | memorization | inversion
    #: what the run must provide: canaries, text, users, reference, secrets:<dataset>, formatted
    needs: tuple[str, ...]
    run: Callable  # (AttackContext, AttackParams) -> pyarrow.Table | dict
    description: str
    #: what the attacker must have (named beside the attack's numbers)
    threat_model: str
    #: canary kind -> the attack it ranks that kind's canaries identically to (e.g. min-k is the loss on one-token
    #: secrets)
    ranks_like: Mapping[str, str] = field(default_factory=dict)
    #: never queries the model: a baseline for non-randomised pools (its AUROC measures their shift, not leakage)
    baseline: bool = False

    def declared(self) -> dict:
        """What the attack record says of this attack (``attack.schema.AttackMeta``)."""
        return {"family": self.family, "threat_model": self.threat_model, "ranks_like": dict(self.ranks_like),
                "baseline": self.baseline}


ATTACKS: Registry[Attack] = Registry("attack")


def register_attack(name: str, family: str, needs: tuple[str, ...], description: str, *, threat_model: str,
                    ranks_like: Mapping[str, str] | None = None, baseline: bool = False):
    """Register the decorated function as attack ``name`` with what it needs of a run and what it declares."""
    def deco(fn):
        ATTACKS.register(name)(Attack(name, family, needs, fn, description, threat_model, dict(ranks_like or {}),
                                      baseline))
        return fn

    return deco
