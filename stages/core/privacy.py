"""DP accounting shared by the stages that need it (the fine-tune's DP-SGD, the audit's planned ceiling):
one definition of sigma calibration, so a run and the audit's plan for it use the same noise multiplier."""
from __future__ import annotations

import functools


@functools.lru_cache(maxsize=64)
def calibrate_sigma(epsilon: float, delta: float, sample_rate: float, steps: int, accountant: str) -> float:
    """Noise multiplier that spends exactly (epsilon, delta) over ``steps`` steps at rate q (opacus' accountant,
    to within 0.005 in epsilon)."""
    from opacus.accountants.utils import get_noise_multiplier

    return float(get_noise_multiplier(
        target_epsilon=epsilon, target_delta=delta, sample_rate=sample_rate, steps=steps,
        accountant=accountant, epsilon_tolerance=0.005,
    ))
