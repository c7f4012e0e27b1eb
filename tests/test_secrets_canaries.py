"""Secret extractors and canary construction (incl. the GX contract on canaries)."""
import numpy as np
import pytest

from stages.canary import CANARY_KINDS, Corpus, KindContext, Vocab, build_kind
from stages.config import CanaryChecks, CanaryParams, DatasetSecretsParams
from stages.errors import ConfigError, DataError
from stages.extractors import EXTRACTORS, PII_PATTERNS, ExtractInput, author_name_of, genre_of, split_secret
from stages.extractors.ngrams import frequent_sequences


def test_pii_regexes():
    body = "Call me at (713) 853-1234 or 713-555-9876, fax 713.555.0000. Mail jane.doe@enron.com now. Ref 12-3456."
    assert PII_PATTERNS["phone"].findall(body) == ["(713) 853-1234", "713-555-9876", "713.555.0000"]
    assert PII_PATTERNS["email"].findall(body) == ["jane.doe@enron.com"]


def test_pii_secrets_take_the_text_before_their_first_occurrence():
    train = [{"message_id": "m1", "body": "nothing here"}, {"message_id": "m2", "body": "Call me at 713-555-9876 ok"}]
    data = ExtractInput(train, [{"value": "713-555-9876", "kind": "phone", "count": 1}])
    (s,) = list(EXTRACTORS.get("phone")(data, DatasetSecretsParams(prompt_chars=6)))
    assert s == {"kind": "phone", "value": "713-555-9876", "prompt": "me at ", "continuation": "713-555-9876",
                 "source": "m2", "occurrences": 1}


def test_split_secret_like_table_5():
    assert split_secret("Forwarded by Steven J Kean/NA/Enron", 0.6) == ("Forwarded by Steven J", " Kean/NA/Enron")
    assert split_secret("Carol St. Clair EB 3889 713-853-3989", 0.6) == ("Carol St. Clair EB 3889", " 713-853-3989")
    assert split_secret("nospaceatall", 0.5) == ("nospac", "eatall")


def test_frequent_sequences_merge_overlapping_ngrams():
    sig = "Carol St. Clair\nEB 3889\n713-853-3989 (Phone)\n713-646-3393 (Fax)"
    texts = [f"msg {i} about deal {i * 7}. {sig}\nthanks {i}" for i in range(5)] + ["unrelated text " * 10]
    found = frequent_sequences(texts, n=20, top_k=500, min_count=2)
    assert found and found[0][1] == 5 and sig in found[0][0]
    # no returned sequence is contained in another one (maximal, non-overlapping)
    assert not any(a != b and a in b for a, _ in found for b, _ in found)
    assert frequent_sequences(texts, n=20, top_k=500, min_count=6) == []


def test_sequence_secrets_from_candidates():
    data = ExtractInput([], [{"value": "Forwarded by Mark Taylor/HOU/ECT", "kind": "sequence", "count": 4}])
    (s,) = list(EXTRACTORS.get("sequence")(data, DatasetSecretsParams(prompt_fraction=0.5)))
    assert (s["prompt"], s["continuation"], s["occurrences"]) == ("Forwarded by Mark", " Taylor/HOU/ECT", 4)


def test_tofu_genre_and_name():
    texts = ["Jaime Vasquez specializes in the true crime genre.", "Jaime Vasquez writes in the true crime genre.",
             "His crime genre novels", "Who is Jaime Vasquez?"]
    assert genre_of(texts) == "true crime"
    assert author_name_of(texts) == "Jaime Vasquez"
    rows = [{"author": 3, "question": t, "answer": ""} for t in texts]
    (s,) = list(EXTRACTORS.get("genre")(ExtractInput(rows), DatasetSecretsParams()))
    assert s == {"kind": "genre", "value": "true crime", "prompt": "What genre does Jaime Vasquez write in?",
                 "continuation": " true crime", "source": "author:3", "occurrences": 2}


WORDS = tuple("apple river stone cloud table mirror garden window candle forest engine pocket ladder silver "
              "planet rocket bridge castle dragon falcon".split())
VOCAB = Vocab(base_size=500, allowed=np.arange(3, 500), words=WORDS)


def test_new_token_secrets_are_unique_new_ids():
    p = CanaryParams(num_canaries=200, secret_length=2, prefix_length=5)
    rows = build_kind("new_token", p, KindContext(VOCAB, 500))
    secrets = [t for r in rows for t in r["secret_ids"]]
    assert len(set(secrets)) == len(secrets) == 400
    assert min(secrets) == 500 and max(secrets) == 899
    assert all(t < 500 for r in rows for t in r["prefix_ids"])  # new tokens occur nowhere else
    assert CANARY_KINDS.get("new_token").new_tokens(200, 2) == 400


def test_random_kind_draws_ordinary_tokens_and_membership_is_fair():
    shares = []
    for seed in range(20):
        rows = build_kind("random", CanaryParams(seed=seed, num_canaries=500), KindContext(VOCAB, 500))
        assert all(3 <= t < 500 for r in rows for t in r["secret_ids"] + r["prefix_ids"])
        shares.append(np.mean([r["member"] for r in rows]))
    assert abs(np.mean(shares) - 0.5) < 0.01  # membership ~ Bernoulli(1/2) over seeds
    a = build_kind("random", CanaryParams(seed=1), KindContext(VOCAB, 500))
    b = build_kind("random", CanaryParams(seed=1), KindContext(VOCAB, 500))
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


def test_formatted_canaries_follow_the_secret_sharer_design():
    from stages.canary.formatted import build_formatted
    from stages.config import FormattedParams

    rows = build_formatted(FormattedParams(candidates=10, inserted_fraction=0.4, repetition_step=10), WORDS)
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
    rows = build_kind("unigram", CanaryParams(num_canaries=60, secret_length=1), KindContext(VOCAB, 500, corpus))
    secrets = [r["secret_ids"][0] for r in rows]
    assert len(set(secrets)) == 60  # one token per canary
    assert all(corpus.unigram[t] == 0 for t in secrets)  # 100 tokens never occur: all secrets come from them
    rows = build_kind("unigram", CanaryParams(num_canaries=150, secret_length=1), KindContext(VOCAB, 500, corpus))
    counts = sorted(corpus.unigram[[r["secret_ids"][0] for r in rows]])
    allowed_counts = sorted(corpus.unigram[VOCAB.allowed])
    assert counts == allowed_counts[:150]  # exactly the 150 rarest


def test_bigram_secrets_never_follow_their_predecessor():
    corpus = _corpus()
    rows = build_kind("bigram", CanaryParams(num_canaries=40, secret_length=3), KindContext(VOCAB, 500, corpus))
    used = [t for r in rows for t in r["secret_ids"]]
    assert len(set(used)) == len(used)
    for r in rows:
        chain = [r["prefix_ids"][-1]] + r["secret_ids"]
        assert all(b not in corpus.bigram.get(a, set()) for a, b in zip(chain[:-1], chain[1:]))


def test_model_based_picks_the_least_likely_next_token(tiny_base):
    import json

    from stages.canaries import base_next_token

    size = json.loads((tiny_base / "config.json").read_text())["vocab_size"]
    vocab = Vocab(base_size=size, allowed=np.arange(1, size))
    score = base_next_token(tiny_base)
    rows = build_kind("model_based", CanaryParams(num_canaries=8, secret_length=1, prefix_length=4),
                      KindContext(vocab, size, None, score))
    lp = score([r["prefix_ids"] for r in rows])
    used: set[int] = set()
    for j, r in enumerate(rows):  # each: the least likely allowed token not taken by an earlier canary
        expected = next(int(t) for t in np.argsort(lp[j]) if t >= 1 and int(t) not in used)
        assert r["secret_ids"] == [expected]
        used.add(expected)


def test_heldout_prefixes_come_from_distinct_heldout_samples():
    samples = [list(range(i, i + 20)) for i in range(100, 400, 3)]
    rows = build_kind("random", CanaryParams(num_canaries=50, prefix="heldout", prefix_length=8), KindContext(VOCAB, 500),
                      prefix_samples=samples)
    firsts = [r["prefix_ids"] for r in rows]
    assert all(p == s[:8] for p in firsts for s in [samples[(p[0] - 100) // 3]])
    assert len({tuple(p) for p in firsts}) == 50


def test_iid_guard_passes_iid_and_fires_on_a_shift():
    from stages.auditing.iid import iid_guard

    rng = np.random.default_rng(0)

    def rows(shift):
        out = []
        for _ in range(400):
            member = bool(rng.random() < 0.5)
            base = rng.normal(-10, 1) - (shift if member else 0.0)
            out.append({"member": member, "prefix_ids": [1] * 12, "secret_ids": [5], "prefix_log_freq": rng.normal(),
                        "secret_log_freq": rng.normal(), "base_token_logprobs": [0.0] * 11 + [base]})
        return out

    assert iid_guard({"random": rows(0.0)}, 0.001)["passed"]
    with pytest.raises(DataError, match=r"canaries 'random': members and non-members differ in base-model loss of the secret"):
        iid_guard({"random": rows(1.0)}, 0.001)


def test_canary_users_carry_their_substring_in_every_document(tmp_path, tiny_tokenizer):
    import pyarrow as pa

    from stages.canary.users import apply_canary_users, build_canary_users
    from stages.config import CanaryUsersParams
    from stages.data.schemas import ENRON_USERS

    d = tmp_path / "enron_users"
    d.mkdir()
    rng = np.random.default_rng(0)
    for split in ("train", "valid", "test", "attacker", "heldout"):
        rows = [{"message_id": f"<{split}{u}{i}>", "file": "f", "mailbox": "m", "sender": f"u{u}@x", "recipients": [],
                 "subject": "", "date": "", "body": " ".join(f"word{rng.integers(100)}" for _ in range(30)),
                 "user": f"u{u}@x", "user_set": "held_in" if u % 2 else "held_out"} for u in range(6) for i in range(3)]
        pa.parquet.write_table(pa.Table.from_pylist(rows, schema=ENRON_USERS), d / f"{split}.parquet")
    import pyarrow.parquet  # noqa: F401

    cu = build_canary_users(CanaryUsersParams(lengths=(1, 4), per_length=2), tmp_path, tiny_tokenizer, tmp_path)
    assert len({c["user"] for c in cu}) == 4
    assert sorted(c["user_set"] for c in cu) == ["held_in", "held_in", "held_out", "held_out"]
    mapping = {c["user"]: c["substring"] for c in cu}
    for split in ("train", "valid", "test", "attacker", "heldout"):
        rows = pa.parquet.read_table(d / f"{split}.parquet").to_pylist()
        for r in apply_canary_users(rows, mapping):
            if r["user"] in mapping:
                assert mapping[r["user"]] in r["body"]
    again = apply_canary_users(rows, mapping)
    assert again == apply_canary_users(rows, mapping)  # same insertion position every time
