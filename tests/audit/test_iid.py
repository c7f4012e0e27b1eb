"""The canary sanity check: passes exchangeable member/non-member canaries, fires on a shift."""
import numpy as np
import pytest

from stages.audit.iid import sanity_check
from stages.shared.core.errors import DataError


def test_sanity_check_passes_iid_and_fires_on_a_shift():
    rng = np.random.default_rng(0)

    def rows(shift):
        out = []
        for _ in range(400):
            member = bool(rng.random() < 0.5)
            base = rng.normal(-10, 1) - (shift if member else 0.0)
            out.append({"member": member, "prefix_ids": [1] * 12, "secret_ids": [5], "prefix_log_freq": rng.normal(),
                        "secret_log_freq": rng.normal(), "base_token_logprobs": [0.0] * 11 + [base]})
        return out

    assert sanity_check({"random": rows(0.0)}, 0.001)["passed"]
    with pytest.raises(DataError,
                       match=r"canaries 'random': members and non-members differ in base-model loss of the secret"):
        sanity_check({"random": rows(1.0)}, 0.001)
