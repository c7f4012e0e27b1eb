"""Canary users (user-inference Algorithm 1): each carries its substring in every document, inserted at the
same place by every stage; membership is half of each length by a seeded permutation, trained on (or not)
accordingly, at most ``documents`` of a held-in user's documents."""
import numpy as np
import pyarrow.parquet as pq
import pytest
from testkit.data import SPLITS, users_dataset
from testkit.project import params

from stages.canaries.params import CanaryUsersParams
from stages.canaries.users import build_canary_users
from stages.shared.core.errors import ConfigError
from stages.shared.datasets import get_dataset
from stages.shared.datasets.users import apply_canary_users, canary_user_split

ENRON_COLUMNS = ("message_id", "body")  # enron_users' user_columns
USERS = get_dataset("enron_users")


def test_canary_users_carry_their_substring_in_every_document(tmp_path, tiny_tokenizer):
    d = users_dataset(tmp_path)
    cu = build_canary_users(params(CanaryUsersParams, "canaries.users", lengths=[1, 4], per_length=4), USERS,
                            tmp_path, tiny_tokenizer, tmp_path)
    assert len({c["user"] for c in cu}) == 8
    mapping = {c["user"]: c for c in cu}
    for split in SPLITS:
        rows = pq.read_table(d / f"{split}.parquet").to_pylist()
        for r in apply_canary_users(rows, mapping, ENRON_COLUMNS):
            if r["user"] in mapping:
                assert mapping[r["user"]]["substring"] in r["body"]
                assert r["user_set"] == mapping[r["user"]]["user_set"]  # the coin's draw, not the preprocess's
    again = apply_canary_users(rows, mapping, ENRON_COLUMNS)
    assert again == apply_canary_users(rows, mapping, ENRON_COLUMNS)  # same insertion position every time


def test_membership_is_half_of_each_length_by_a_seeded_permutation(tmp_path, tiny_tokenizer):
    users_dataset(tmp_path, n_users=40)
    draws, same_as_preprocess = [], []
    for seed in range(30):
        cu = build_canary_users(params(CanaryUsersParams, "canaries.users", lengths=[1, 2, 4], per_length=4,
                                       seed=seed), USERS, tmp_path, tiny_tokenizer, tmp_path)
        for length in (1, 2, 4):
            sets = [c["user_set"] for c in cu if c["length"] == length]
            assert sorted(sets) == ["held_in"] * 2 + ["held_out"] * 2  # exactly half of every length
        draws.append(tuple(c["user_set"] for c in cu))
        # the assignment, not the preprocess's set (odd users were held in there)
        same_as_preprocess += [(c["user_set"] == "held_in") == (int(c["user"][1:-2]) % 2 == 1) for c in cu]
    assert len(set(draws)) > 20  # the seed changes the draw (no fixed alternation)
    assert 0.35 < np.mean(same_as_preprocess) < 0.65  # independent of the user's original set
    again = build_canary_users(params(CanaryUsersParams, "canaries.users", lengths=[1, 2, 4], per_length=4, seed=29),
                               USERS, tmp_path, tiny_tokenizer, tmp_path)
    assert tuple(c["user_set"] for c in again) == draws[-1]  # seeded
    odd = [c["user_set"] for seed in range(20) for c in build_canary_users(
        params(CanaryUsersParams, "canaries.users", lengths=[1], per_length=5, seed=seed), USERS, tmp_path,
        tiny_tokenizer, tmp_path)]
    per_draw = [odd[i:i + 5].count("held_in") for i in range(0, len(odd), 5)]
    assert set(per_draw) == {2, 3}  # an odd length's extra user goes either way (a coin)


def test_documents_are_given_in_turn_to_held_in_users_and_cap_what_is_trained(tmp_path, tiny_tokenizer):
    d = users_dataset(tmp_path, n_users=40)
    cu = build_canary_users(params(CanaryUsersParams, "canaries.users", lengths=[1], per_length=8,
                                   documents=[1, None]), USERS, tmp_path, tiny_tokenizer, tmp_path)
    held_in = [c for c in cu if c["user_set"] == "held_in"]
    assert sorted(c["documents"] or 0 for c in held_in) == [0, 0, 1, 1]  # each count in turn, 2 users each
    assert all(c["documents"] is None for c in cu if c["user_set"] == "held_out")
    read = lambda s: pq.read_table(d / f"{s}.parquet").to_pylist()  # noqa: E731
    mapping = {c["user"]: c for c in cu}
    train = canary_user_split(read, "train", mapping)
    for c in held_in:
        trained = [r for r in train if r["user"] == c["user"]]
        whole = [r for s in ("train", "heldout") for r in read(s) if r["user"] == c["user"]]
        assert len(trained) == (c["documents"] or len(whole)) and len(whole) > 1
    with pytest.raises(ConfigError, match="canaries.users.documents"):
        params(CanaryUsersParams, "canaries.users", per_length=4, documents=[1, 2, 3])


def test_held_in_canary_users_are_trained_on_and_held_out_ones_never(tmp_path, tiny_tokenizer):
    d = users_dataset(tmp_path)
    read = lambda s: pq.read_table(d / f"{s}.parquet").to_pylist()  # noqa: E731
    # u2 was a held-out user, drawn in; u3 was held in, drawn out
    cu = {"u2@x": {"user": "u2@x", "length": 1, "user_set": "held_in", "substring": "zz"},
          "u3@x": {"user": "u3@x", "length": 1, "user_set": "held_out", "substring": "yy"}}
    train = canary_user_split(read, "train", cu)
    users = {r["user"] for r in train}
    assert "u2@x" in users and "u3@x" not in users
    assert sum(r["user"] == "u2@x" for r in train) == 3  # all of u2's trainable (heldout-split) documents
    heldout = {r["user"] for r in canary_user_split(read, "heldout", cu)}
    assert "u3@x" in heldout and "u2@x" not in heldout
    assert canary_user_split(read, "attacker", cu) == read("attacker")  # attacker knowledge is never trained on


def test_fewer_than_two_per_length_is_refused():
    with pytest.raises(ConfigError, match="canaries.users.per_length"):
        params(CanaryUsersParams, "canaries.users", per_length=1)
