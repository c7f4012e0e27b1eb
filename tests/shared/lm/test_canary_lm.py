"""CanaryLM (new-token rows), batched scoring and the trainable model's save/load, on a tiny random Llama."""
import numpy as np
import pytest
import torch

from stages.shared.lm.examples import canary_examples, make_example
from stages.shared.lm.scoring import token_logprobs
from stages.shared.lm.trainable import Trainable, build_model, load_model, save_model

NUM_NEW = 20
SECRET_ROWS = (4, 9, 12, 40)


def spec(paradigm: str = "lora", secret_rows: tuple[int, ...] = SECRET_ROWS) -> Trainable:
    return Trainable(paradigm=paradigm, lora_r=4, lora_alpha=8, lora_dropout=0.0, lora_targets=("q_proj", "v_proj"),
                     virtual_tokens=3, num_new_tokens=NUM_NEW, new_token_init="mean", secret_rows=secret_rows,
                     train_embeddings=False)


@pytest.fixture()
def model(tiny_base):
    torch.manual_seed(0)
    return build_model(tiny_base, spec(), torch.device("cpu"))


def test_logprobs_match_full_softmax(model):
    m, _ = model
    V = m.base_vocab
    ids = torch.tensor([[5, 6, 7, V + 3, 9], [11, V + 1, 12, 13, 14]])
    with torch.no_grad():  # the secret rows away from their base copies, so replacing them shows
        m.row_head.weight.add_(torch.randn_like(m.row_head.weight))
        m.row_embed.weight.add_(torch.randn_like(m.row_embed.weight))
    hidden, new_logits = m(ids)
    base = m.head(hidden)
    base[..., list(SECRET_ROWS)] = m.row_head(hidden)
    full = torch.cat([base, m.new_head(hidden)], -1).log_softmax(-1)
    rows, cols = torch.tensor([0, 0, 1]), torch.tensor([2, 3, 0])
    targets = torch.tensor([V + 3, 9, V + 1])
    got = m.logprobs_at(hidden, new_logits, rows, cols, targets)
    torch.testing.assert_close(got, full[rows, cols, targets])
    # new-token ids use the new rows and secret ids their own rows as input embeddings; others the base matrix
    emb = m.embed_ids(ids)
    torch.testing.assert_close(emb[0, 3], m.new_embed.weight[3])
    torch.testing.assert_close(emb[0, 4], m.row_embed.weight[SECRET_ROWS.index(9)])
    torch.testing.assert_close(emb[1, 2], m.row_embed.weight[SECRET_ROWS.index(12)])
    torch.testing.assert_close(emb[0, 0], m.embed.weight[5])


def test_secret_rows_start_as_the_base_model(tiny_base):
    """Before training, a model with secret rows scores every token exactly as the model without them."""
    torch.manual_seed(0)
    with_rows, tok = build_model(tiny_base, spec(), torch.device("cpu"))
    torch.manual_seed(0)
    without, _ = build_model(tiny_base, spec(secret_rows=()), torch.device("cpu"))
    rng = np.random.default_rng(2)
    exs = [make_example(rng.integers(1, 60, 6).tolist(), [int(s)], "nwp", "x") for s in SECRET_ROWS + (5, 6)]
    for a, b in zip(token_logprobs(with_rows, exs, tok.pad_token_id), token_logprobs(without, exs, tok.pad_token_id)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_bucketed_scoring_equals_one_by_one(model):
    m, tok = model
    rng = np.random.default_rng(1)
    exs = [make_example(rng.integers(1, m.base_vocab, int(rng.integers(2, 12))).tolist(),
                        rng.integers(1, m.base_vocab, int(rng.integers(1, 4))).tolist(), "sft", "x") for _ in range(23)]
    batched = token_logprobs(m, exs, tok.pad_token_id, batch_size=8)
    for e, b in zip(exs, batched):
        (single,) = token_logprobs(m, [e], tok.pad_token_id, batch_size=1)
        np.testing.assert_allclose(b, single, rtol=1e-4, atol=1e-5)
        assert len(b) == int((e.labels != -100).sum())


@pytest.mark.parametrize("paradigm", ["lora", "full", "prompt", "prefix"])
def test_save_and_load_roundtrip(paradigm, tiny_base, tmp_path):
    torch.manual_seed(0)
    m, tok = build_model(tiny_base, spec(paradigm), torch.device("cpu"))
    with torch.no_grad():  # every trainable tensor away from its initialisation
        for p in m.parameters():
            if p.requires_grad:
                p.add_(0.05 * torch.randn_like(p))
    save_model(m, tmp_path)
    assert Trainable.from_json(spec(paradigm).to_json()) == spec(paradigm)  # what run.json records
    m2, _ = load_model(tiny_base, tmp_path, spec(paradigm), torch.device("cpu"))
    m.eval()
    rng = np.random.default_rng(0)
    rows = [{"kind": "new_token", "prefix_ids": rng.integers(1, m.base_vocab, 6).tolist(),
             "secret_ids": [m.base_vocab + i % NUM_NEW]} for i in range(30)]
    for x, y in zip(token_logprobs(m, canary_examples(rows, "sft"), tok.pad_token_id),
                    token_logprobs(m2, canary_examples(rows, "sft"), tok.pad_token_id)):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-5)
