"""Secret extractors and canary construction (incl. the GX contract on canaries)."""
import numpy as np
import pytest

from stages.canary import CANARY_KINDS, Vocab, build_kind
from stages.config import CanaryChecks, CanaryParams
from stages.errors import ConfigError, DataError
from stages.extractors import EXTRACTORS, author_name_of, genre_of


def test_pii_regexes():
    body = "Call me at (713) 853-1234 or 713-555-9876, fax 713.555.0000. Mail jane.doe@enron.com now. Ref 12-3456."
    rows = [{"message_id": "m1", "body": body}]
    phones = [s["value"] for s in EXTRACTORS.get("phone")(rows, 20)]
    emails = [s["value"] for s in EXTRACTORS.get("email")(rows, 20)]
    assert phones == ["(713) 853-1234", "713-555-9876", "713.555.0000"]
    assert emails == ["jane.doe@enron.com"]
    first = next(EXTRACTORS.get("phone")(rows, 11))
    assert first["prompt"] == "Call me at " and first["source"] == "m1"


def test_tofu_genre_and_name():
    texts = ["Jaime Vasquez specializes in the true crime genre.", "Jaime Vasquez writes in the true crime genre.",
             "His crime genre novels", "Who is Jaime Vasquez?"]
    assert genre_of(texts) == "true crime"
    assert author_name_of(texts) == "Jaime Vasquez"
    rows = [{"author": 3, "question": t, "answer": ""} for t in texts]
    (s,) = list(EXTRACTORS.get("genre")(rows, 200))
    assert s == {"kind": "genre", "value": "true crime", "prompt": "What genre does Jaime Vasquez write in?",
                 "source": "author:3"}


VOCAB = Vocab(base_size=500, allowed=np.arange(3, 500))


def test_new_token_secrets_are_unique_new_ids():
    p = CanaryParams(num_canaries=200, secret_length=2, prefix_length=5)
    rows = build_kind("new_token", p, VOCAB, new_offset=500)
    secrets = [t for r in rows for t in r["secret_ids"]]
    assert len(set(secrets)) == len(secrets) == 400
    assert min(secrets) == 500 and max(secrets) == 899
    assert all(t < 500 for r in rows for t in r["prefix_ids"])  # new tokens occur nowhere else
    assert CANARY_KINDS.get("new_token").new_tokens(200, 2) == 400


def test_random_kind_draws_ordinary_tokens_and_membership_is_fair():
    shares = []
    for seed in range(20):
        rows = build_kind("random", CanaryParams(seed=seed, num_canaries=500), VOCAB, new_offset=500)
        assert all(3 <= t < 500 for r in rows for t in r["secret_ids"] + r["prefix_ids"])
        shares.append(np.mean([r["member"] for r in rows]))
    assert abs(np.mean(shares) - 0.5) < 0.01  # membership ~ Bernoulli(1/2) over seeds
    a = build_kind("random", CanaryParams(seed=1), VOCAB, 500)
    b = build_kind("random", CanaryParams(seed=1), VOCAB, 500)
    assert a == b  # seeded


def test_unknown_kind_error_names_key():
    with pytest.raises(ConfigError, match=r"canaries.kinds\[1\]: unknown canary kind 'bogus'"):
        CANARY_KINDS.get("bogus", key="canaries.kinds[1]")


def test_gx_suite_fails_on_shifted_membership(tmp_path):
    from stages.canaries import build_canaries

    # member_prob 0.9 -> member share far outside [0.45, 0.55]: the GX suite must fail the stage
    params = CanaryParams(num_canaries=200, member_prob=0.9, kinds=("random",), checks=CanaryChecks(0.45, 0.55))
    with pytest.raises(DataError, match=r"GX suite 'canaries_random' failed: expect_column_mean_to_be_between\(member"):
        build_canaries(params, VOCAB, tmp_path)
    assert not (tmp_path / "random.parquet").exists()


def test_gx_suite_passes_and_reports(tmp_path):
    from stages.canaries import build_canaries

    meta = build_canaries(CanaryParams(num_canaries=300), VOCAB, tmp_path)
    assert meta["num_new_tokens"] == 300 and meta["kinds"]["new_token"]["new_token_offset"] == 500
    import json

    gx = json.loads((tmp_path / "gx_results.json").read_text())
    assert all(r["success"] for k in gx.values() for r in k["results"])
    assert len(gx["random"]["results"]) == 5
