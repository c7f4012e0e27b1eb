"""Every attack, registered: importing this module fills ``ATTACKS`` (one module per attack family)."""
from . import acr, blind, exposure, inversion, membership, memorization  # noqa: F401  (each module registers its attacks)
from .registry import ATTACKS, Attack, register_attack  # noqa: F401
