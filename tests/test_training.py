"""CanaryLM, batched scoring and the (DP) training loop on a tiny in-process Llama."""
import numpy as np
import pytest
import torch

from stages.config import DPParams, FinetuneParams, LoraParams
from stages.training.examples import canary_examples, make_example
from stages.training.loop import calibrate_sigma, train
from stages.training.scoring import token_logprobs
from stages.training.setup import build_model, load_model, save_model

NUM_NEW = 20


def _canaries(n=40, seed=0, vocab=300):
    rng = np.random.default_rng(seed)
    return [{"canary_id": f"c{i}", "kind": "new_token", "prefix_ids": rng.integers(1, vocab, 6).tolist(),
             "secret_ids": [vocab_base + i % NUM_NEW], "member": bool(i % 2)} for i in range(n)
            for vocab_base in [VOCAB]]


VOCAB = None  # set from the tiny base model in the fixture


@pytest.fixture()
def model(tiny_base):
    global VOCAB
    torch.manual_seed(0)
    ft = FinetuneParams(lora=LoraParams(r=4, alpha=8))
    m, tok = build_model(tiny_base, ft, NUM_NEW, "mean", torch.device("cpu"))
    VOCAB = m.base_vocab
    return m, tok


def test_logprobs_match_full_softmax(model):
    m, tok = model
    ids = torch.tensor([[5, 6, 7, VOCAB + 3, 9], [11, VOCAB + 1, 12, 13, 14]])
    hidden, new_logits = m(ids)
    full = torch.cat([m.head(hidden), new_logits], -1).log_softmax(-1)
    rows, cols = torch.tensor([0, 0, 1]), torch.tensor([2, 3, 0])
    targets = torch.tensor([VOCAB + 3, 9, VOCAB + 1])
    got = m.logprobs_at(hidden, new_logits, rows, cols, targets)
    torch.testing.assert_close(got, full[rows, cols, targets])
    # new-token ids really use the new rows as input embeddings
    torch.testing.assert_close(m.embed_ids(ids)[0, 3], m.new_embed.weight[3])


def test_bucketed_scoring_equals_one_by_one(model):
    m, tok = model
    rng = np.random.default_rng(1)
    exs = [make_example(rng.integers(1, VOCAB, int(rng.integers(2, 12))).tolist(),
                        rng.integers(1, VOCAB, int(rng.integers(1, 4))).tolist(), "sft", "x") for _ in range(23)]
    batched = token_logprobs(m, exs, tok.pad_token_id, batch_size=8)
    for e, b in zip(exs, batched):
        (single,) = token_logprobs(m, [e], tok.pad_token_id, batch_size=1)
        np.testing.assert_allclose(b, single, rtol=1e-4, atol=1e-5)
        assert len(b) == int((e.labels != -100).sum())


def _train(m, tok, dp=None, steps=30, seed=0, examples=None):
    exs = examples or canary_examples([c for c in _canaries() if c["member"]], "sft")
    return train(m, exs, steps=steps, batch_size=10, physical_batch_size=4, lr=1e-2, weight_decay=0.0,
                 clip_norm=1.0, seed=seed, pad_id=tok.pad_token_id, dp=dp)


def _member_scores(m, tok):
    rows = _canaries()
    lps = token_logprobs(m, canary_examples(rows, "sft"), tok.pad_token_id)
    return np.array([x.sum() for x in lps]), np.array([r["member"] for r in rows])


def test_non_dp_training_memorizes_members_only(model):
    m, tok = model
    before = m.new_head.weight.detach().clone()
    s0, members = _member_scores(m, tok)
    res = _train(m, tok)
    s1, _ = _member_scores(m, tok)
    moved = (m.new_head.weight.detach() - before).norm(dim=1)
    member_rows = sorted({i % NUM_NEW for i in range(40) if i % 2})
    other_rows = [i for i in range(NUM_NEW) if i not in member_rows]
    # non-member rows only feel the softmax normaliser, identically (they are exchangeable)
    assert moved[member_rows].min() > moved[other_rows].max()
    torch.testing.assert_close(moved[other_rows], moved[other_rows][:1].expand(len(other_rows)))
    assert (s1 - s0)[members].mean() > 1.0  # members became much more likely
    assert res.privacy == {"dp": False} and res.steps == 30


def test_dp_training_moves_lora_and_new_rows_and_spends_target_epsilon(model):
    m, tok = model
    lora = {n: p.detach().clone() for n, p in m.named_parameters() if "lora_B" in n}
    rows_before = m.new_head.weight.detach().clone()
    emb_before = m.new_embed.weight.detach().clone()
    res = _train(m, tok, dp=DPParams(enabled=True, epsilon=8.0, delta=1e-5), steps=20)
    assert res.privacy["dp"] and res.privacy["accounted_steps"] == 20
    assert res.privacy["epsilon_spent"] == pytest.approx(8.0, rel=0.02)
    assert res.privacy["noise_multiplier"] == pytest.approx(
        calibrate_sigma(8.0, 1e-5, res.sample_rate, 20, "prv"), rel=1e-9)
    assert all((p.detach() - lora[n]).abs().max() > 0 for n, p in m.named_parameters() if n in lora)
    moved = (m.new_head.weight.detach() - rows_before).norm(dim=1)
    assert (moved > 0).all()  # noise reaches every new row, member or not
    assert (m.new_embed.weight.detach() - emb_before).abs().max() > 0


def test_dp_empty_poisson_batch_still_steps(model):
    m, tok = model
    exs = canary_examples(_canaries()[:1], "sft")  # n=1, q=1 ... force emptiness with a tiny rate
    before = m.new_head.weight.detach().clone()
    res = train(m, exs * 1, steps=3, batch_size=1, physical_batch_size=4, lr=1e-2, weight_decay=0.0, clip_norm=1.0,
                seed=3, pad_id=tok.pad_token_id, dp=DPParams(enabled=True, epsilon=50.0, delta=1e-5))
    assert res.privacy["accounted_steps"] == 3
    assert (m.new_head.weight.detach() - before).abs().max() > 0


def test_training_is_deterministic(tiny_base):
    outs = []
    for _ in range(2):
        torch.manual_seed(0)
        m, tok = build_model(tiny_base, FinetuneParams(lora=LoraParams(r=4, alpha=8)), NUM_NEW, "mean",
                             torch.device("cpu"))
        res = _train(m, tok, steps=5, dp=DPParams(enabled=True, epsilon=8.0, delta=1e-5))
        outs.append(([r["loss"] for r in res.log], m.new_head.weight.detach().clone()))
    assert outs[0][0] == outs[1][0]
    torch.testing.assert_close(outs[0][1], outs[1][1])


def test_save_and_load_roundtrip(model, tiny_base, tmp_path):
    import json

    m, tok = model
    _train(m, tok, steps=5)
    save_model(m, tmp_path)
    (tmp_path / "run.json").write_text(json.dumps({"num_new_tokens": NUM_NEW}))
    m2, _ = load_model(tiny_base, tmp_path, torch.device("cpu"))
    m.eval()
    exs = canary_examples(_canaries(), "sft")
    a = token_logprobs(m, exs, tok.pad_token_id)
    b = token_logprobs(m2, exs, tok.pad_token_id)
    for x, y in zip(a, b):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-5)
