"""The attack stage's public surface for the flows: what a registered attack declares (``registry.Attack``)."""
from __future__ import annotations

from .catalog import ATTACKS


def declared(name: str) -> dict:
    """What attack ``name`` declares at registration (family, threat model, ranks_like, baseline)."""
    return ATTACKS.get(name, "attack").declared()


def threat_model(name: str) -> str:
    """The threat model attack ``name`` declares."""
    return declared(name)["threat_model"]
