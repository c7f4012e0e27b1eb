"""The attack registry: each attack declares its family and what a run must provide for it.

Membership attacks reduce per-token log-probabilities, computed once per (model, example) by the
attack context and shared by every attack, to one score per item (higher = more likely a member):
canaries (each kind a group), real text samples ("text") or users ("users"). Memorization attacks
(VMR, AIR, ACR), exposure and embedding inversion produce their own tables. Asking for an attack on a
run that lacks what it needs is a one-line error naming what is missing.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..core.registry import Registry


@dataclass(frozen=True)
class Attack:
    name: str
    family: str  # membership | exposure | memorization | inversion
    #: what the run must provide: canaries, text, users, reference, secrets:<dataset>, formatted
    needs: tuple[str, ...]
    run: Callable  # (AttackContext, AttackParams) -> pyarrow.Table | dict
    description: str = ""


ATTACKS: Registry[Attack] = Registry("attack")


def register_attack(name: str, family: str, needs: tuple[str, ...], description: str = ""):
    def deco(fn):
        ATTACKS.register(name)(Attack(name, family, needs, fn, description))
        return fn

    return deco
