"""The DP engine self-check at the user level (paradigm ``users``: finetune.dp.unit: user on the linear probe, each
canary a user of rows_per_user + 1 rows): a user's whole contribution moves its own coordinates by C per draw
(sensitivity), users are drawn Bin(T, q) (inclusion), and an engine that clips each row on its own while the
accountant books users (tests/testkit/mutants.py ``user_clip_per_example``) is flagged for its sensitivity."""
import contextlib
import dataclasses

import numpy as np
import pytest
from testkit import mutants
from testkit.project import ROOT

from leakaudit import selfcheck as flow
from stages.shared.core.params import load
from stages.tools.selfcheck import trials as S
from stages.tools.selfcheck.params import SelfcheckParams


def design(**overrides) -> SelfcheckParams:
    return dataclasses.replace(load(SelfcheckParams, "selfcheck", ROOT / "params.yaml"), **overrides)


def user_config() -> S.Config:
    (config,) = [c for c in S.configs_of(design()) if c.paradigm == "users"]
    return config


def test_the_default_set_has_a_user_level_configuration():
    config = user_config()
    assert (config.mode, config.probe, config.processes) == ("hooks", "linear", 1) and config.sample_rate < 1
    assert config.steps >= 2 and design().rows_per_user >= 2  # each user holds more rows than a step takes


def test_a_user_level_pool_holds_each_member_user_rows_times():
    members = np.array([True, False, True, True])
    pool, users = S.user_pool(list("abcd"), members, 3)
    assert pool == list("aaacccddd") and users == [0, 0, 0, 2, 2, 2, 3, 3, 3]


def _check(sc, name, seed):
    config = user_config()
    with mutants.mutant(name) if name else contextlib.nullcontext():
        (row,) = flow.check(sc, [config], seed=seed, mutant=name, log=lambda _: None, family=len(design().configs))
    return row


def test_user_level_engine_passes_and_per_example_clipping_is_flagged_on_a_small_probe():
    """m = 600 canary users at the default family's level. The mutant's slope is rows_per_user (each trained row
    clipped to C: 2 C per draw), about 11 standard errors from 1 here; the correct engine's is 1."""
    sc = design(canaries=600, guesses_in=100, guesses_out=100)
    ok = _check(sc, None, 4)
    assert not ok["flagged"], ok["broke"]
    assert abs(ok["sensitivity"] - 1) < 0.3 and ok["tests"]["inclusion"]["p"] > ok["test_level"]
    bad = _check(sc, "user_clip_per_example", 4)
    assert bad["flagged"] and "clipped sensitivity" in bad["broke"], bad["broke"]
    assert bad["sensitivity"] == pytest.approx(sc.rows_per_user, abs=0.4)
    assert bad["tests"]["inclusion"]["p"] == ok["tests"]["inclusion"]["p"]  # the same users drawn: only clipping


@pytest.mark.slow  # two whole default user-level configurations (m = 30000 users; ~1.5 min each on 2 cores)
def test_default_user_level_configuration_passes_and_its_mutant_is_flagged():
    sc = design()
    ok = _check(sc, None, 21)
    assert not ok["flagged"], ok["broke"]
    assert ok["accountant_epsilon"] == pytest.approx(sc.epsilon, abs=0.01)
    assert abs(ok["noise_scale"] - 1) < 0.05 and abs(ok["sensitivity"] - 1) < 0.05
    bad = _check(sc, "user_clip_per_example", 21)
    assert bad["flagged"] and "clipped sensitivity" in bad["broke"], bad["broke"]
