"""Every attack, registered: importing this module fills ``ATTACKS`` (one module per attack family)."""
# each module registers its attacks
from . import acr, blind, exposure, inversion, membership, memorization, rmia, user_inference  # noqa: F401
from .registry import ATTACKS, Attack, register_attack  # noqa: F401
