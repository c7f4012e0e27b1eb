"""The (DP) training loop on a tiny in-process Llama: memorisation, opacus DP, determinism, resume."""
import json

import numpy as np
import pytest
import torch
from testkit.models import NUM_NEW, SECRET_ROWS, canary_rows, dp_params, finetune_params
from testkit.models import tiny_canary_lm as tiny_model

from stages.finetune.checkpoint import Checkpointer
from stages.finetune.loop import TrainConfig, train
from stages.finetune.privacy.engine import public_divisor
from stages.finetune.sampling import inclusion_counts
from stages.shared.core.errors import ConfigError
from stages.shared.core.privacy import calibrate_sigma
from stages.shared.core.seeds import stream
from stages.shared.lm.examples import canary_examples, make_example
from stages.shared.lm.scoring import token_logprobs


def _canaries(n=40, seed=0):
    return canary_rows(VOCAB, n, seed)


VOCAB = None  # the tiny base model's vocabulary size (the new tokens' first id), set before every test


@pytest.fixture(autouse=True)
def _vocab(tiny_base):
    """Every test of this module, run alone or in any order, draws canaries over the tiny base's vocabulary."""
    global VOCAB
    VOCAB = json.loads((tiny_base / "config.json").read_text())["vocab_size"]


@pytest.fixture()
def model(tiny_base):
    torch.manual_seed(0)
    m, tok = tiny_model(tiny_base)
    assert m.base_vocab == VOCAB
    return m, tok


def _train(m, tok, dp=None, steps=30, seed=0, examples=None):
    exs = examples or canary_examples([c for c in _canaries() if c["member"]], "sft")
    return train(m, exs, TrainConfig(
        steps=steps, batch_size=10, physical_batch_size=4, lr=1e-2, weight_decay=0.0, clip_norm=1.0, seed=seed,
        pad_id=tok.pad_token_id, dp=dp))


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
    assert not res.privacy.dp and res.privacy.epsilon_spent == float("inf") and res.steps == 30


def test_vocabulary_secrets_are_learned_through_their_own_rows(model):
    """A random-token canary's secret (a vocabulary id) has its own input/output rows like a new token: its
    members' rows move, the others only feel the softmax normaliser; every other vocabulary row stays frozen."""
    m, tok = model
    rng = np.random.default_rng(3)
    rows = [{"canary_id": f"r{i}", "kind": "random", "prefix_ids": rng.integers(100, 300, 6).tolist(),
             "secret_ids": [SECRET_ROWS[i % len(SECRET_ROWS)]], "member": i % len(SECRET_ROWS) < 3} for i in range(36)]
    head0, emb0 = m.row_head.weight.detach().clone(), m.row_embed.weight.detach().clone()
    base_head0 = m.head.weight.detach().clone()
    lp0 = token_logprobs(m, canary_examples(rows, "sft"), tok.pad_token_id)
    _train(m, tok, examples=canary_examples([r for r in rows if r["member"]], "sft"))
    lp1 = token_logprobs(m, canary_examples(rows, "sft"), tok.pad_token_id)
    moved = (m.row_head.weight.detach() - head0).norm(dim=1)
    assert moved[:3].min() > moved[3:].max()  # SECRET_ROWS is sorted: the first three are the members' secrets
    torch.testing.assert_close(m.embed.weight, base_head0)  # the tied base matrix is untouched
    gain = np.array([b.sum() - a.sum() for a, b in zip(lp0, lp1)])
    member = np.array([r["member"] for r in rows])
    assert gain[member].mean() > 1.0 and gain[member].mean() > gain[~member].mean() + 1.0
    assert torch.equal(m.row_embed.weight[3:], emb0[3:])  # non-member secrets never appear in the input


def test_dp_training_moves_lora_and_new_rows_and_spends_target_epsilon(model):
    m, tok = model
    lora = {n: p.detach().clone() for n, p in m.named_parameters() if "lora_B" in n}
    rows_before = m.new_head.weight.detach().clone()
    emb_before = m.new_embed.weight.detach().clone()
    res = _train(m, tok, dp=dp_params(enabled=True, epsilon=8.0, delta=1e-5), steps=20)
    assert res.privacy.dp and res.privacy.accounted_steps == 20
    assert res.privacy.epsilon_spent == pytest.approx(8.0, rel=0.02)
    assert res.privacy.noise_multiplier == pytest.approx(
        calibrate_sigma(8.0, 1e-5, res.sample_rate, 20, "prv"), rel=1e-9)
    assert all((p.detach() - lora[n]).abs().max() > 0 for n, p in m.named_parameters() if n in lora)
    moved = (m.new_head.weight.detach() - rows_before).norm(dim=1)
    assert (moved > 0).all()  # noise reaches every new row, member or not
    assert (m.new_embed.weight.detach() - emb_before).abs().max() > 0


def test_dp_empty_poisson_batch_still_steps(model):
    m, tok = model
    exs = canary_examples(_canaries()[:1], "sft")  # n=1, q=1 ... force emptiness with a tiny rate
    before = m.new_head.weight.detach().clone()
    res = train(m, exs * 1, TrainConfig(
        steps=3, batch_size=1, physical_batch_size=4, lr=1e-2, weight_decay=0.0, clip_norm=1.0, seed=3,
        pad_id=tok.pad_token_id, dp=dp_params(enabled=True, epsilon=50.0, delta=1e-5)))
    assert res.privacy.accounted_steps == 3
    assert (m.new_head.weight.detach() - before).abs().max() > 0


@pytest.mark.slow  # two whole DP training runs
def test_training_is_deterministic(tiny_base):
    outs = []
    for _ in range(2):
        torch.manual_seed(0)
        m, tok = tiny_model(tiny_base)
        res = _train(m, tok, steps=5, dp=dp_params(enabled=True, epsilon=8.0, delta=1e-5))
        outs.append((res.inclusions, m.new_head.weight.detach().clone()))
        assert res.log == [{"step": k + 1} for k in range(5)]  # a DP log: step indices only (loop.dp_record)
    np.testing.assert_array_equal(outs[0][0], outs[1][0])
    torch.testing.assert_close(outs[0][1], outs[1][1], rtol=0, atol=0)
    # the counts the loop kept as it drew the batches are the sampler's replay from its seed
    seed = stream("finetune.sampler").int_seed(0)
    np.testing.assert_array_equal(outs[0][0], inclusion_counts(len(outs[0][0]), res.sample_rate, 5, seed))


@pytest.mark.parametrize("b,T,sigma", [(4096, 500, 0.962), (2048, 1000, 0.814), (4096, 1000, 1.14), (8192, 1000, 1.91)])
def test_sigma_calibration_matches_seed_table_10(b, T, sigma):
    # empirical-privacy-variance Table 10: PRV, n = 180000, epsilon = 4, delta = 1e-6
    assert calibrate_sigma(4.0, 1e-6, b / 180000, T, "prv") == pytest.approx(sigma, rel=0.01)


@pytest.mark.parametrize("paradigm,optimizer", [("lora", "adamw"), ("full", "sgd"), ("prompt", "adam"),
                                                ("prefix", "adamw")])
def test_weights_really_move_under_dp(tiny_base, paradigm, optimizer):
    torch.manual_seed(0)
    m, tok = tiny_model(tiny_base, paradigm=paradigm, virtual_tokens=3)
    trainable = {n: p.detach().clone() for n, p in m.named_parameters() if p.requires_grad}
    frozen = {n: p.detach().clone() for n, p in m.named_parameters() if not p.requires_grad}
    expected = {"lora": "lora_", "full": "layers.0.mlp", "prompt": "prompt.embedding", "prefix": "prefix.embedding"}
    assert any(expected[paradigm] in n for n in trainable), sorted(trainable)[:5]
    assert {"new_embed.weight", "new_head.weight", "row_embed.weight", "row_head.weight"} <= set(trainable)
    res = train(m, canary_examples([c for c in _canaries() if c["member"]], "sft"), TrainConfig(
        steps=3, batch_size=10, physical_batch_size=4, lr=1e-2, weight_decay=0.0, clip_norm=1.0, seed=0,
        pad_id=tok.pad_token_id, dp=dp_params(enabled=True, epsilon=8.0, delta=1e-5), optimizer=optimizer))
    assert res.privacy.optimizer == f"DP-{optimizer}" and res.privacy.accounted_steps == 3
    after = dict(m.named_parameters())
    for n, before in trainable.items():  # every trainable tensor moved (noise alone moves it under DP)
        assert (after[n].detach() - before).abs().max() > 0, n
    for n, before in frozen.items():
        torch.testing.assert_close(after[n].detach(), before)
    eps = [p["epsilon"] for p in res.privacy.profile]
    assert eps == sorted(eps)  # epsilon grows as delta shrinks (profile is ordered by decreasing delta)


@pytest.mark.slow  # three whole DP training runs
def test_resume_after_a_crash_reaches_the_same_result(tiny_base, tmp_path):
    exs = canary_examples([c for c in _canaries() if c["member"]], "sft")

    def run(checkpoint=None, crash_at=None):
        torch.manual_seed(0)
        m, tok = tiny_model(tiny_base)

        def on_step(rec):
            if rec["step"] == crash_at:
                raise KeyboardInterrupt("killed")

        res = train(m, exs, TrainConfig(
            steps=6, batch_size=10, physical_batch_size=4, lr=1e-2, weight_decay=0.0, clip_norm=1.0, seed=0,
            pad_id=tok.pad_token_id, dp=dp_params(enabled=True, epsilon=8.0, delta=1e-5), checkpoint=checkpoint,
            on_step=on_step))
        return res, m.trainable_state()

    ref, ref_state = run()
    ck = Checkpointer(tmp_path / "run.pt", every=2, fingerprint="abc")
    with pytest.raises(KeyboardInterrupt):
        run(ck, crash_at=5)
    saved = torch.load(ck.path, weights_only=False)
    assert ck.path.is_file() and saved["step"] == 4 and "sampler_seed" not in saved  # a state, never a seed
    res, state = run(ck)
    assert res.resumed_from == 4 and not ck.path.exists()
    assert res.log == ref.log and np.array_equal(res.inclusions, ref.inclusions)
    assert res.privacy.epsilon_spent == ref.privacy.epsilon_spent and res.privacy.accounted_steps == 6
    for k in ref_state:
        torch.testing.assert_close(state[k], ref_state[k], rtol=0, atol=0)
    # a checkpoint of other inputs is ignored
    Checkpointer(tmp_path / "run.pt", every=2, fingerprint="abc").save({"step": 4})
    assert Checkpointer(tmp_path / "run.pt", every=2, fingerprint="other").load() is None


def test_q_above_one_is_refused(model):
    m, tok = model
    with pytest.raises(ConfigError, match="finetune.batch_size: 50 examples per step out of n=20 gives q = 2.5 > 1"):
        train(m, canary_examples(_canaries()[:20], "sft"), TrainConfig(
            steps=1, batch_size=50, physical_batch_size=4, lr=1e-2, weight_decay=0.0, clip_norm=1.0, seed=0,
            pad_id=tok.pad_token_id))


def test_rms_norm_per_example_grads_are_exact():
    """The registered RMSNorm sampler equals per-example autograd gradients."""
    from opacus import GradSampleModule
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    from stages.finetune.privacy.layers import register_for

    torch.manual_seed(0)
    norm = LlamaRMSNorm(8, eps=1e-6)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
    register_for(norm)
    x = torch.randn(3, 5, 8)
    gsm = GradSampleModule(norm, batch_first=True, loss_reduction="sum")
    (gsm(x) ** 2).sum().backward()
    for i in range(3):
        w = norm.weight.detach().clone().requires_grad_(True)
        ref = LlamaRMSNorm(8, eps=1e-6)
        ref.weight = torch.nn.Parameter(w)
        (ref(x[i:i + 1]) ** 2).sum().backward()
        torch.testing.assert_close(norm.weight.grad_sample[i], ref.weight.grad)


def test_fixed_repetitions_insert_each_canary_exactly_k_times(model):
    m, tok = model
    canaries = canary_examples(_canaries()[:6], "sft")
    text = canary_examples(_canaries(seed=5)[:10], "sft")
    res = train(m, text, TrainConfig(
        steps=8, batch_size=1, physical_batch_size=8, lr=1e-3, weight_decay=0.0, clip_norm=1.0, seed=0,
        pad_id=tok.pad_token_id, sample_rate=1e-12, scheduled=canaries, repetitions=3))
    assert sum(r["batch"] for r in res.log) == 6 * 3  # the Poisson part is empty at q = 1e-12
    assert max(r["batch"] for r in res.log) <= 6
    with pytest.raises(ConfigError, match="finetune.canary_insertion"):
        train(m, text, TrainConfig(
            steps=2, batch_size=1, physical_batch_size=8, lr=1e-3, weight_decay=0.0, clip_norm=1.0, seed=0,
            pad_id=tok.pad_token_id, scheduled=canaries, dp=dp_params(enabled=True, delta=1e-5)))


def test_rate_and_delta_come_from_the_candidate_pool_not_the_membership_draw(model, tiny_base):
    # two membership draws of the same 40 canaries: different pools, the same q, sigma and default delta
    runs = []
    for seed in (0, 1):
        m, tok = tiny_model(tiny_base)
        rows = _canaries(seed=0)
        draw = np.random.default_rng(seed).random(len(rows)) < 0.5
        members = [r for r, keep in zip(rows, draw) if keep]
        res = train(m, canary_examples(members, "sft"), TrainConfig(
            steps=1, batch_size=10, physical_batch_size=4, lr=1e-3, weight_decay=0.0, clip_norm=1.0, seed=0,
            pad_id=tok.pad_token_id, dp=dp_params(enabled=True, epsilon=8.0, delta=None), population=len(rows)))
        runs.append((len(members), res))
    (n0, a), (n1, b) = runs
    assert n0 != n1
    assert a.sample_rate == b.sample_rate == 10 / 40
    assert a.privacy.delta == b.privacy.delta == pytest.approx(40 ** -1.1)
    assert a.privacy.noise_multiplier == b.privacy.noise_multiplier
    assert a.expected_drawn_batch == pytest.approx(10 / 40 * n0)  # what the pool actually yields per step
    # DP-SGD divides by a public constant: the candidate pool's expected batch, the same for both neighbours
    assert a.privacy.public_divisor == b.privacy.public_divisor == 10


def test_neighbouring_pools_get_the_same_dp_sgd_divisor(tiny_base):
    """Two pools that differ in one example: DP-SGD divides the noisy clipped sum by the same public number."""
    rows = _canaries(seed=3)
    divisors = []
    for n in (20, 21):
        m, tok = tiny_model(tiny_base)
        res = train(m, canary_examples(rows[:n], "sft"), TrainConfig(
            steps=1, batch_size=10, physical_batch_size=8, lr=1e-3, weight_decay=0.0, clip_norm=1.0, seed=0,
            pad_id=tok.pad_token_id, optimizer="sgd", dp=dp_params(enabled=True, epsilon=8.0, delta=1e-5),
            population=40))
        divisors.append(res.privacy.public_divisor)
    assert divisors == [10, 10]
    assert public_divisor(0.25, 40) == 10 and public_divisor(0.25, 40, world_size=2) == 5


def test_train_config_of_a_run_carries_its_recipe_and_facts(tmp_path):
    ft = finetune_params(steps=7, batch_size=3, physical_batch_size=5, lr=0.1, weight_decay=0.01, clip_norm=2.0,
                         seed=4, sample_rate=0.2, optimizer="sgd", momentum=0.5, canary_repetitions=2,
                         dp={"enabled": True, "epsilon": 2.0})
    ck = Checkpointer(tmp_path / "run.pt", every=2, fingerprint="abc")
    scheduled = [make_example([1, 2], [3], "sft", "new_token")] * 2
    c = TrainConfig.of(ft, pad_id=9, population=30, scheduled=scheduled, checkpoint=ck)
    assert (c.steps, c.batch_size, c.physical_batch_size, c.lr, c.weight_decay, c.clip_norm, c.seed, c.sample_rate,
            c.optimizer, c.momentum, c.repetitions) == (7, 3, 5, 0.1, 0.01, 2.0, 4, 0.2, "sgd", 0.5, 2)
    assert c.dp == ft.dp and c.private and c.pad_id == 9 and c.population == 30 and c.checkpoint is ck
    assert c.scheduled == tuple(scheduled) and c.on_step is None and c.progress
    with pytest.raises(AttributeError):
        c.steps = 8  # frozen
