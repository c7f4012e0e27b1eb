"""Canary kinds and the canary set: secrets of each kind, fair seeded membership, the GX suite, formatted
canaries, held-out prefixes."""
import json

import numpy as np
import pytest
from testkit.project import params

from stages.canaries.build import base_next_token, build_canaries
from stages.canaries.checks import member_share_band
from stages.canaries.formatted import build_formatted
from stages.canaries.kinds import CANARY_KINDS, Corpus, KindContext, Vocab, build_kind
from stages.canaries.params import CanaryParams, FormattedParams
from stages.shared.core.errors import ConfigError, DataError


def canary_params(**overrides) -> CanaryParams:
    return params(CanaryParams, "canaries", **overrides)


WORDS = tuple("apple river stone cloud table mirror garden window candle forest engine pocket ladder silver "
              "planet rocket bridge castle dragon falcon".split())
VOCAB = Vocab(base_size=500, allowed=np.arange(3, 500), words=WORDS)



def test_new_token_secrets_are_unique_new_ids():
    p = canary_params(num_canaries=200, secret_length=2, prefix_length=5)
    rows = build_kind("new_token", p, KindContext(VOCAB, 500))
    secrets = [t for r in rows for t in r["secret_ids"]]
    assert len(set(secrets)) == len(secrets) == 400
    assert min(secrets) == 500 and max(secrets) == 899
    assert all(t < 500 for r in rows for t in r["prefix_ids"])  # new tokens occur nowhere else
    assert CANARY_KINDS.get("new_token").new_tokens(200, 2) == 400


def test_random_kind_draws_ordinary_tokens_and_membership_is_fair():
    shares = []
    for seed in range(20):
        rows = build_kind("random", canary_params(seed=seed, num_canaries=500), KindContext(VOCAB, 500))
        assert all(3 <= t < 500 for r in rows for t in r["secret_ids"] + r["prefix_ids"])
        shares.append(np.mean([r["member"] for r in rows]))
    assert abs(np.mean(shares) - 0.5) < 0.01  # membership ~ Bernoulli(1/2) over seeds
    a = build_kind("random", canary_params(seed=1), KindContext(VOCAB, 500))
    b = build_kind("random", canary_params(seed=1), KindContext(VOCAB, 500))
    assert a == b  # seeded


def test_unknown_kind_error_names_key():
    with pytest.raises(ConfigError, match=r"canaries.kinds\[1\]: unknown canary kind 'bogus'"):
        CANARY_KINDS.get("bogus", key="canaries.kinds[1]")


def test_gx_suite_fails_when_membership_does_not_follow_the_coin(tmp_path, monkeypatch):
    # a bug that makes 90% of the canaries members while params say 0.5: the binomial guard must fail the stage
    import stages.canaries.build as build

    real = build.canary_suite
    monkeypatch.setattr(build, "canary_suite", lambda kind, rows, params: real(
        kind, [{**r, "member": i % 10 != 0} for i, r in enumerate(rows)], params))
    p = canary_params(num_canaries=200, kinds=["random"], checks={"member_share_alpha": 1e-6})
    with pytest.raises(DataError, match=r"GX suite 'canaries_random' failed: expect_column_mean_to_be_between\(member"):
        build_canaries(p, VOCAB, tmp_path)
    assert not (tmp_path / "random.parquet").exists()


def test_member_share_band_refuses_fair_coins_at_its_stated_rate():
    from scipy.stats import binom

    lo, hi = member_share_band(1000, 0.5, 1e-6)
    assert lo <= 0.446 <= hi  # confirmation seed 104's fair draw, refused by the old fixed [0.45, 0.55]
    false_alarm = binom.cdf(lo * 1000 - 1, 1000, 0.5) + binom.sf(hi * 1000, 1000, 0.5)
    assert false_alarm <= 1e-6
    assert binom.sf(hi * 1000, 1000, 0.6) > 0.9  # power against a coin of bias 0.6
    lo9, hi9 = member_share_band(200, 0.9, 1e-6)
    assert lo9 < 0.9 < hi9  # the band is centred on the configured member_prob, not on 0.5


def test_gx_suite_passes_and_reports(tmp_path):
    meta = build_canaries(canary_params(num_canaries=300, kinds=["new_token", "random"]), VOCAB, tmp_path)
    assert meta["num_new_tokens"] == 300 and meta["kinds"]["new_token"]["new_token_offset"] == 500
    gx = json.loads((tmp_path / "gx_results.json").read_text())
    assert all(r["success"] for k in gx.values() for r in k["results"])
    assert len(gx["random"]["results"]) == 5


def test_formatted_canaries_follow_the_secret_sharer_design():
    rows = build_formatted(params(FormattedParams, "canaries.formatted", candidates=10, inserted_fraction=0.4,
                                  repetition_step=10), WORDS)
    assert {r["format"] for r in rows} == {"name", "city", "email", "phone", "letters", "one_word", "three_words"}
    for fmt in {r["format"] for r in rows}:
        fr = [r for r in rows if r["format"] == fmt]
        assert len(fr) == 10 and len({r["fill"] for r in fr}) == 10  # |R| distinct fills
        assert [r["repetitions"] for r in fr if r["inserted"]] == [10, 20, 30, 40]  # 40% inserted, 10, 20, ...
        assert all(r["repetitions"] == 0 for r in fr if not r["inserted"])
        assert all(r["fill"] in r["text"] for r in fr)
    phone = next(r for r in rows if r["format"] == "phone")["fill"]
    assert len(phone.split()) == 5 and all(d.isdigit() for d in phone.split())
    letters = next(r for r in rows if r["format"] == "letters")["fill"]
    assert len(letters.split()) == 6 and letters.replace(" ", "").isalpha()


def _corpus():
    rng = np.random.default_rng(3)
    # tokens 3..399 appear 1..many times; 400..499 never: the rarest
    seqs = [rng.integers(3, 400, 30).tolist() for _ in range(200)]
    return Corpus.from_sequences(seqs, 500)


def test_unigram_picks_the_rarest_tokens():
    corpus = _corpus()
    rows = build_kind("unigram", canary_params(num_canaries=60, secret_length=1), KindContext(VOCAB, 500, corpus))
    secrets = [r["secret_ids"][0] for r in rows]
    assert len(set(secrets)) == 60  # one token per canary
    assert all(corpus.unigram[t] == 0 for t in secrets)  # 100 tokens never occur: all secrets come from them
    rows = build_kind("unigram", canary_params(num_canaries=150, secret_length=1), KindContext(VOCAB, 500, corpus))
    counts = sorted(corpus.unigram[[r["secret_ids"][0] for r in rows]])
    allowed_counts = sorted(corpus.unigram[VOCAB.allowed])
    assert counts == allowed_counts[:150]  # exactly the 150 rarest


def test_bigram_secrets_never_follow_their_predecessor():
    corpus = _corpus()
    rows = build_kind("bigram", canary_params(num_canaries=40, secret_length=3), KindContext(VOCAB, 500, corpus))
    used = [t for r in rows for t in r["secret_ids"]]
    assert len(set(used)) == len(used)
    for r in rows:
        chain = [r["prefix_ids"][-1]] + r["secret_ids"]
        assert all(b not in corpus.bigram.get(a, set()) for a, b in zip(chain[:-1], chain[1:]))


def test_model_based_picks_the_least_likely_next_token(tiny_base):
    size = json.loads((tiny_base / "config.json").read_text())["vocab_size"]
    vocab = Vocab(base_size=size, allowed=np.arange(1, size))
    score = base_next_token(tiny_base)
    rows = build_kind("model_based", canary_params(num_canaries=8, secret_length=1, prefix_length=4),
                      KindContext(vocab, size, None, score))
    lp = score([r["prefix_ids"] for r in rows])
    used: set[int] = set()
    for j, r in enumerate(rows):  # each: the least likely allowed token not taken by an earlier canary
        expected = next(int(t) for t in np.argsort(lp[j]) if t >= 1 and int(t) not in used)
        assert r["secret_ids"] == [expected]
        used.add(expected)


def test_heldout_prefixes_come_from_distinct_heldout_samples():
    samples = [list(range(i, i + 20)) for i in range(100, 400, 3)]
    rows = build_kind("random", canary_params(num_canaries=50, prefix="heldout", prefix_length=8),
                      KindContext(VOCAB, 500), prefix_samples=samples)
    firsts = [r["prefix_ids"] for r in rows]
    assert all(p == s[:8] for p in firsts for s in [samples[(p[0] - 100) // 3]])
    assert len({tuple(p) for p in firsts}) == 50
