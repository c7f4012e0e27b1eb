"""The user-level audit's canary users (canaries.audit_users): k rows per user sharing a new token of the user's own,
one seeded coin per user, drawn from a named stream, checked by their GX suite."""
import numpy as np
import pytest
from testkit.project import params

from stages.canaries.audit_users import AuditUsersParams, audit_users_suite, build_audit_users
from stages.canaries.kinds import Vocab
from stages.shared.core.errors import ConfigError, DataError
from stages.shared.core.gx import check_suites

VOCAB = Vocab(base_size=500, allowed=np.arange(10, 400))


def _params(**kw) -> AuditUsersParams:
    return params(AuditUsersParams, "canaries.audit_users", **kw)


def test_each_user_holds_k_rows_sharing_its_own_new_token_and_one_coin():
    p = _params(rows=3)
    rows = build_audit_users(p, VOCAB, new_offset=520)
    assert len(rows) == p.m * 3
    by_user = {}
    for r in rows:
        by_user.setdefault(r["user"], []).append(r)
    assert sorted(by_user) == list(range(p.m))
    for u, rs in by_user.items():
        assert len(rs) == 3
        assert {tuple(r["secret_ids"]) for r in rs} == {(520 + u,)}  # one new token per user, no other user's
        assert len({r["member"] for r in rs}) == 1  # one coin per user
        assert all(len(r["prefix_ids"]) == p.prefix_length and min(r["prefix_ids"]) >= 10 for r in rs)
    assert len({tuple(r["prefix_ids"]) for r in rows}) == len(rows)  # a prefix per row
    share = np.mean([rs[0]["member"] for rs in by_user.values()])
    assert abs(share - 0.5) < 0.06
    assert len({r["canary_id"] for r in rows}) == len(rows)


def test_the_draw_is_seeded_and_the_coins_do_not_depend_on_the_rows_per_user():
    a = build_audit_users(_params(rows=2), VOCAB, 520)
    b = build_audit_users(_params(rows=2), VOCAB, 520)
    c = build_audit_users(_params(rows=5), VOCAB, 520)
    other = build_audit_users(_params(rows=2, seed=7), VOCAB, 520)
    assert a == b
    coins = lambda rows, k: [r["member"] for r in rows[::k]]  # noqa: E731
    assert coins(a, 2) == coins(c, 5)
    assert coins(a, 2) != coins(other, 2)


def test_params_refuse_fewer_than_1000_users_naming_the_key():
    with pytest.raises(ConfigError, match=r"canaries\.audit_users\.m"):
        _params(m=200)


def test_the_suite_refuses_a_user_whose_rows_disagree_or_a_missing_row():
    p = _params(rows=2)
    rows = build_audit_users(p, VOCAB, 520)
    check_suites([audit_users_suite(rows, p, 1e-6)], "ok")  # passes as built
    bad = [dict(r) for r in rows]
    bad[0]["member"] = not bad[0]["member"]
    with pytest.raises(DataError):
        check_suites([audit_users_suite(bad, p, 1e-6)], "audit_users.parquet")
    with pytest.raises(DataError):
        check_suites([audit_users_suite(rows[1:], p, 1e-6)], "audit_users.parquet")
