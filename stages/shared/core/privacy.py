"""DP accounting shared by the stages that need it (the fine-tune's DP-SGD, the audit's planned ceiling):
one definition of sigma calibration, so a run and the audit's plan for it use the same noise multiplier, and one
way to make an accountant.

opacus' PRV accountant (Gopi et al. 2021) discretises the privacy-loss distribution on a domain whose half-width
comes from an RDP bound (their remark 5.6), and opacus sums that bound's series term by term in Python: about
0.5 s a call, most of the time of every calibration and audit. ``PRV`` is opacus' accountant with the same bound
summed as arrays (``rdp_epsilon``: the same orders, terms and stopping index, the sum in another order, so equal
to about 1e-15). The domain is then aligned to the mesh (``Domain.create_aligned``), so both give the same domain,
hence the same epsilon to the bit (tests/shared/core/test_privacy.py compares them, and sigma, on a grid)."""
from __future__ import annotations

import functools
import math

#: opacus' RDP orders (``RDPAccountant.DEFAULT_ALPHAS``), which its PRV domain bound takes the best of
ORDERS = tuple([1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64)))
#: opacus' largest noise multiplier before it calls a budget too low (``opacus.accountants.utils.MAX_SIGMA``)
MAX_SIGMA = 1e6


def _log_a_fractional(q: float, sigma: float, alpha: float, chunk: int = 256) -> float:
    """log A_alpha of the sampled Gaussian at a fractional order (Mironov et al. 2019, section 3.3): the two series
    opacus' ``_compute_log_a_for_frac_alpha`` sums, each term as it computes it, up to the first index where both
    terms are below e^-30 (included), summed with their signs after scaling by the largest."""
    import numpy as np
    from scipy import special

    z0 = sigma ** 2 * math.log(1 / q - 1) + 0.5
    parts, start = [], 0
    while True:
        i = np.arange(start, start + chunk, dtype=float)
        coef = special.binom(alpha, i)
        j = alpha - i
        log_coef = np.log(np.abs(coef))
        # log(1/2) + log erfc(x), erfc(x) = 2 Phi(-x sqrt 2) (opacus' _log_erfc)
        s0 = (log_coef + i * math.log(q) + j * math.log(1 - q) + (i * i - i) / (2 * sigma ** 2)
              + math.log(0.5) + math.log(2) + special.log_ndtr(-((i - z0) / (math.sqrt(2) * sigma)) * 2 ** 0.5))
        s1 = (log_coef + j * math.log(q) + i * math.log(1 - q) + (j * j - j) / (2 * sigma ** 2)
              + math.log(0.5) + math.log(2) + special.log_ndtr(-((z0 - j) / (math.sqrt(2) * sigma)) * 2 ** 0.5))
        stop = np.flatnonzero(np.maximum(s0, s1) < -30)
        n = int(stop[0]) + 1 if stop.size else chunk
        parts.append((s0[:n], s1[:n], np.where(coef[:n] > 0, 1.0, -1.0)))
        if stop.size:
            break
        start += chunk
    s0, s1, sign = (np.concatenate(p) for p in zip(*parts))
    a0, a1 = (float(s.max() + np.log(np.sum(sign * np.exp(s - s.max())))) for s in (s0, s1))
    return math.log1p(math.exp(min(a0, a1) - max(a0, a1))) + max(a0, a1)


def rdp_epsilon(history: list[tuple[float, float, int]], delta: float) -> float:
    """epsilon at ``delta`` of the composed sampled Gaussians ``history`` ((sigma, q, steps) each), by opacus' RDP
    accountant's orders and conversion, the fractional orders' log A summed as arrays."""
    import numpy as np
    from opacus.accountants.analysis import rdp

    total = np.zeros(len(ORDERS))
    for sigma, q, steps in history:
        if q == 0 or sigma == 0 or q == 1.0:  # opacus' closed forms
            total += np.asarray(rdp.compute_rdp(q=q, noise_multiplier=sigma, steps=steps, orders=list(ORDERS)))
            continue
        total += steps * np.array([(rdp._compute_log_a_for_int_alpha(q, sigma, int(a)) if float(a).is_integer()
                                    else _log_a_fractional(q, sigma, a)) / (a - 1) for a in ORDERS])
    eps, _ = rdp.get_privacy_spent(orders=list(ORDERS), rdp=total, delta=delta)
    return float(eps)


def _prv_class():
    from opacus.accountants import PRVAccountant
    from opacus.accountants.analysis.prv import Domain

    class PRV(PRVAccountant):
        """opacus' PRV accountant; its discretisation domain's half-width (Gopi et al., remark 5.6, as opacus'
        ``compute_safe_domain_size`` writes it) from ``rdp_epsilon``."""

        def _get_domain(self, prvs, num_self_compositions, eps_error, delta_error):
            import numpy as np

            total = sum(num_self_compositions)
            half = rdp_epsilon([(p.noise_multiplier, p.sample_rate, t) for p, t in zip(prvs, num_self_compositions)],
                               delta_error / 4)
            for p in prvs:
                half = max(half, rdp_epsilon([(p.noise_multiplier, p.sample_rate, 1)], delta_error / (8 * total)))
            half = max(half, eps_error) + 3
            mesh = eps_error / np.sqrt(total * np.log(12 / delta_error) / 2)
            return Domain.create_aligned(-half, half, mesh)

    return PRV


def create_accountant(mechanism: str):
    """A fresh accountant: ``prv`` is ``PRV`` above, any other name opacus' own (``rdp``, ``gdp``)."""
    if mechanism == "prv":
        return _prv_class()()
    from opacus.accountants import create_accountant as opacus_accountant

    return opacus_accountant(mechanism=mechanism)


@functools.lru_cache(maxsize=64)
def calibrate_sigma(epsilon: float, delta: float, sample_rate: float, steps: int, accountant: str) -> float:
    """Noise multiplier that spends exactly (epsilon, delta) over ``steps`` steps at rate q, to within 0.005 in
    epsilon: opacus' search (``get_noise_multiplier``: doubling from 20, then bisection, returning the upper end)
    over ``create_accountant``'s accountant."""
    acc = create_accountant(accountant)
    eps_high, low, high = math.inf, 0.0, 10.0
    while eps_high > epsilon:
        high = 2 * high
        acc.history = [(high, sample_rate, steps)]
        eps_high = acc.get_epsilon(delta=delta)
        if high > MAX_SIGMA:
            raise ValueError("The privacy budget is too low.")
    while epsilon - eps_high > 0.005:
        sigma = (low + high) / 2
        acc.history = [(sigma, sample_rate, steps)]
        eps = acc.get_epsilon(delta=delta)
        if eps < epsilon:
            high, eps_high = sigma, eps
        else:
            low = sigma
    return float(high)
