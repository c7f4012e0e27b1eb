"""The accountant the stages use (stages/shared/core/privacy.py) is opacus' PRV accountant with its domain bound summed
as
arrays: the same discretisation domain as opacus' own, so the same epsilon and the same calibrated sigma to the bit."""
import itertools
import warnings

import pytest

from stages.shared.core.privacy import calibrate_sigma, create_accountant, rdp_epsilon

#: (q, sigma, steps) across the regimes the pipeline and the self-check run (tiny q, the default runs' own, q near 1),
#: at the delta errors of a run's epsilon (delta 1e-5) and of its profile (delta 1e-10); 630 such configurations,
#: q 0.001-0.99, sigma 0.3-4, 1-1000 steps, gave 630 identical domains when this was written
GRID = list(itertools.product([(0.001, 0.61248779296875, 1000), (0.0293, 1.7, 80),
                               (0.2296718972895863, 0.8154296875, 10), (0.5, 0.3, 4), (0.99, 4.0, 1)],
                              [1e-8, 1e-13]))


@pytest.mark.parametrize("qst,delta_error", GRID)
def test_the_domain_is_opacus_own(qst, delta_error):
    from opacus.accountants import PRVAccountant
    from opacus.accountants.analysis.prv import PoissonSubsampledGaussianPRV

    q, sigma, steps = qst
    args = dict(prvs=[PoissonSubsampledGaussianPRV(q, sigma)], num_self_compositions=[steps], eps_error=0.01,
                delta_error=delta_error)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        ours, theirs = create_accountant("prv")._get_domain(**args), PRVAccountant()._get_domain(**args)
    assert (ours.t_min, ours.t_max, ours.size) == (theirs.t_min, theirs.t_max, theirs.size)


def test_the_rdp_bound_is_opacus_to_rounding():
    from opacus.accountants import RDPAccountant

    for history in ([(0.8154296875, 0.2296718972895863, 10)], [(1.7, 0.0293, 80), (0.5, 0.5, 3)]):
        acc = RDPAccountant()
        acc.history = list(history)
        assert rdp_epsilon(history, 1e-8) == pytest.approx(acc.get_epsilon(delta=1e-8), rel=1e-12, abs=1e-12)


def test_sigma_is_opacus_search_and_the_default_runs_own():
    from opacus.accountants.utils import get_noise_multiplier

    want = get_noise_multiplier(target_epsilon=1.0, target_delta=1e-5, sample_rate=0.01, steps=1000,
                                accountant="prv", epsilon_tolerance=0.005)
    assert calibrate_sigma.__wrapped__(1.0, 1e-5, 0.01, 1000, "prv") == want
    # the committed runs' sigma (data/models/dp_eps8/run.json, data/models/user_dp/run.json), from opacus' search
    assert calibrate_sigma.__wrapped__(8.0, 1e-5, 0.2296718972895863, 10, "prv") == 0.8154296875
    assert calibrate_sigma.__wrapped__(8.0, 1e-5, 0.1, 10, "prv") == 0.61248779296875
    assert create_accountant("rdp").mechanism() == "rdp" and create_accountant("prv").mechanism() == "prv"
