"""User-level DP-SGD (finetune.dp.unit: user) on a tiny in-process Llama: each sampled user's summed gradient is
clipped to C as one unit (exactly the per-user computation), the accountant books the user rate, users are
Poisson-sampled at q with up to dp.rows_per_user of their rows, and what the engine cannot do exactly is refused."""
import json
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from scipy import stats
from testkit.data import users_dataset
from testkit.models import canary_rows, dp_params, finetune_params
from testkit.models import tiny_canary_lm as tiny_model
from torch.optim.optimizer import register_optimizer_step_pre_hook

from stages.finetune.loop import TrainConfig, run_step, start_session, train
from stages.finetune.loss import per_sample_losses
from stages.finetune.sampling import poisson_draw, units_of, user_batch
from stages.shared.core.errors import ConfigError
from stages.shared.core.privacy import calibrate_sigma
from stages.shared.lm.batching import collate
from stages.shared.lm.examples import canary_examples

CLIP = 1e-3  # far below every user's summed gradient norm: every user is clipped


@pytest.fixture()
def vocab(tiny_base):
    return json.loads((tiny_base / "config.json").read_text())["vocab_size"]


def _pool(vocab, rows_per_user=(3, 1, 4, 2, 5), seed=0):
    """Examples and their users: user k holds rows_per_user[k] one-token canaries (the rows interleaved in the pool)."""
    exs = canary_examples(canary_rows(vocab, sum(rows_per_user), seed), "sft")
    users = [f"u{k}" for k, r in enumerate(rows_per_user) for _ in range(r)]
    order = np.random.default_rng(seed).permutation(len(exs))
    return [exs[i] for i in order], [users[i] for i in order]


def _config(tok, users, *, cap=4, mode="hooks", physical=4, sample_rate=1.0, steps=1, **kw):
    return TrainConfig(steps=steps, batch_size=1, physical_batch_size=physical, lr=1.0, weight_decay=0.0,
                       clip_norm=1.0, seed=0, pad_id=tok.pad_token_id, optimizer="sgd", sample_rate=sample_rate,
                       dp=dp_params(enabled=True, epsilon=8.0, delta=1e-5, max_grad_norm=CLIP, grad_sample_mode=mode,
                                    unit="user", rows_per_user=cap), users=users, progress=False, **kw)


def _clipped_sum_of_one_step(tiny_base, exs, users, **kw):
    """One noiseless user-level step (sigma set to 0 on the optimizer): the clipped sum the optimizer formed (the
    gradient the wrapped optimizer steps on x the divisor), the rows each user trained on, the initial weights."""
    torch.manual_seed(0)
    m, tok = tiny_model(tiny_base)
    s = start_session(m, exs, _config(tok, users, **kw))
    s.private.optimizer.noise_multiplier = 0.0
    named = {n: p for n, p in m.named_parameters() if p.requires_grad}
    before = {n: p.detach().clone() for n, p in named.items()}
    received = {}

    def record(opt, args, kwargs):  # the gradient the wrapped SGD steps on: (clipped sum + 0 noise) / divisor
        if not type(opt).__module__.startswith("opacus"):
            received.update({n: p.grad.detach().clone() * s.divisor for n, p in named.items()})

    handle = register_optimizer_step_pre_hook(record)
    try:
        s.net.train()
        run_step(s, 0, s.lengths)
    finally:
        handle.remove()
    update = received
    trained = {u: [i for i in np.flatnonzero(s.counts) if users[i] == u] for u in dict.fromkeys(users)}
    return update, trained, before, tok


def _direct_clipped_sum(tiny_base, before, exs, trained, pad_id):
    """The per-user computation itself: each user's summed loss gradient over its trained rows (a fresh, unwrapped
    model at the same weights), clipped to C, summed over users."""
    m, _ = tiny_model(tiny_base)
    named = dict(m.named_parameters())
    with torch.no_grad():
        for n, v in before.items():
            named[n].copy_(v)
    params = {n: named[n] for n in before}
    total = {n: torch.zeros_like(v) for n, v in before.items()}
    for rows in trained.values():
        if not rows:
            continue
        losses = per_sample_losses(m, collate([exs[i] for i in rows], pad_id, "cpu"))
        grads = torch.autograd.grad(losses.sum(), list(params.values()), allow_unused=True)
        grads = [torch.zeros_like(p) if g is None else g for g, p in zip(grads, params.values())]
        norm = torch.sqrt(sum((g.double() ** 2).sum() for g in grads))
        factor = min(1.0, CLIP / (float(norm) + 1e-6))
        for n, g in zip(params, grads):
            total[n] += factor * g
    return total


def test_user_level_clipping_equals_the_direct_per_user_computation(tiny_base, vocab):
    """Every user sampled (q = 1), a cap below some users' row counts, users spread over several chunks: the clipped
    sum the optimizer formed is the sum over users of each user's clipped summed gradient, computed directly."""
    exs, users = _pool(vocab)
    update, trained, before, tok = _clipped_sum_of_one_step(tiny_base, exs, users, cap=3, physical=4)
    # the cap (3) bites on the users of 4 and 5 rows
    assert {u: len(r) for u, r in trained.items()} == {"u0": 3, "u1": 1, "u2": 3, "u3": 2, "u4": 3}
    direct = _direct_clipped_sum(tiny_base, before, exs, trained, tok.pad_token_id)
    for n in update:
        torch.testing.assert_close(update[n], direct[n], rtol=1e-4, atol=1e-9)
    norm = torch.sqrt(sum((v.double() ** 2).sum() for v in update.values()))
    assert float(norm) > 1.5 * CLIP  # five users, each clipped to C: more than one user's C, less than five
    assert float(norm) <= 5 * CLIP * (1 + 1e-5)


def test_one_users_rows_in_one_step_move_the_clipped_sum_by_at_most_c(tiny_base, vocab):
    """A single user with 4 rows, all trained in one step: its whole contribution has norm C (clipped), where
    clipping each row on its own would let it reach 4 C."""
    exs, users = _pool(vocab, rows_per_user=(4,), seed=1)
    update, trained, _, _ = _clipped_sum_of_one_step(tiny_base, exs, users, cap=4, physical=4)
    assert len(trained["u0"]) == 4
    norm = float(torch.sqrt(sum((v.double() ** 2).sum() for v in update.values())))
    assert norm == pytest.approx(CLIP, rel=1e-4)


def test_the_accountant_books_the_user_rate_and_the_record_names_the_unit(tiny_base, vocab):
    exs, users = _pool(vocab)
    m, tok = tiny_model(tiny_base)
    res = train(m, exs, replace(_config(tok, users, sample_rate=None, steps=3, user_population=8), batch_size=2))
    q = 2 / 8  # batch_size users / the candidate pool's users (not its 15 rows, nor the pool's 5 users)
    assert res.sample_rate == q and res.privacy.sample_rate == q
    assert res.privacy.accountant_history == [[res.privacy.noise_multiplier, q, 3]]
    assert res.privacy.noise_multiplier == pytest.approx(calibrate_sigma(8.0, 1e-5, q, 3, "prv"), rel=1e-9)
    assert res.privacy.public_divisor == 2  # q x the candidate pool's users
    assert res.privacy.unit == "user" and res.privacy.rows_per_user == 4 and res.privacy.grad_sample_mode == "hooks"
    assert set(res.user_inclusions) == set(users) and res.expected_drawn_batch == pytest.approx(q * 5)
    # the default delta counts users too
    m, tok = tiny_model(tiny_base)
    res = train(m, exs, replace(_config(tok, users, user_population=8),
                                dp=dp_params(enabled=True, delta=None, unit="user", grad_sample_mode="auto")))
    assert res.privacy.delta == pytest.approx(8 ** -1.1) and res.privacy.grad_sample_mode == "hooks"


def test_users_are_poisson_sampled_at_q_and_a_users_rows_drawn_uniformly_up_to_the_cap():
    """The sampling law over many draws. Each step the sampler draws one uniform per user (the example-level
    sampler's draw, over users: the same sampled set as poisson_draw); over U = 200 users x T = 4000 steps at q = 0.1
    the total inclusion count is Bin(U T, q): |z| < 4.5 (a false alarm at 7e-6; a sampler at 1.05 q sits 13 standard
    errors away). Per user, the counts are Bin(T, q): the dispersion chi-square (df U - 1) within its 1e-5 tails.
    A user of 5 rows with cap 2 trains each row w.p. 2/5 when sampled (|z| < 4.5 per row), always 2 distinct ones."""
    U, T, q, cap = 200, 4000, 0.1, 2
    sizes = np.random.default_rng(0).integers(1, 6, U)
    unit, rows = units_of([u for u in range(U) for _ in range(sizes[u])])
    assert [len(r) for r in rows] == sizes.tolist() and (unit[rows[7]] == 7).all()
    rng, twin, rows_rng = (np.random.default_rng(s) for s in (1, 1, 2))
    counts, row_counts = np.zeros(U), np.zeros(int(sizes.sum()))
    for _ in range(T):
        sampled, drawn = user_batch(rng, rows_rng, rows, q, cap)
        np.testing.assert_array_equal(sampled, np.flatnonzero(poisson_draw(twin, U, q)))
        counts[sampled] += 1
        for u, r in zip(sampled, drawn):
            assert len(r) == min(cap, sizes[u]) and len(set(r.tolist())) == len(r) and set(r) <= set(rows[u])
            row_counts[r] += 1
    z = (counts.sum() - U * T * q) / np.sqrt(U * T * q * (1 - q))
    assert abs(z) < 4.5
    chi = float(((counts - T * q) ** 2).sum() / (T * q * (1 - q)))
    assert stats.chi2.ppf(1e-5, U - 1) < chi < stats.chi2.isf(1e-5, U - 1)
    for u in np.flatnonzero(sizes == 5)[:5]:
        p = counts[u] / T * cap / 5  # given the user's own draws: each row w.p. cap / 5 when sampled
        for i in rows[u]:
            assert abs(row_counts[i] - T * p) < 4.5 * np.sqrt(T * p * (1 - p))
        assert row_counts[rows[u]].sum() == counts[u] * cap


def test_a_run_replays_its_user_draws_from_the_seed(tiny_base, vocab):
    """The users' inclusion counts of a seeded run are the sampler stream's draws over the users, as user_batch
    replays them from the same seeds."""
    from stages.shared.core.seeds import stream

    exs, users = _pool(vocab)
    m, tok = tiny_model(tiny_base)
    res = train(m, exs, _config(tok, users, sample_rate=0.5, steps=6, cap=2))
    rng = np.random.default_rng(stream("finetune.sampler").int_seed(0))
    rows_rng = np.random.default_rng(stream("finetune.user_rows").int_seed(0))
    unit, rows = units_of(users)
    counts, row_counts = np.zeros(len(rows), dtype=int), np.zeros(len(exs), dtype=int)
    for _ in range(6):
        sampled, drawn = user_batch(rng, rows_rng, rows, 0.5, 2)
        counts[sampled] += 1
        for r in drawn:
            row_counts[r] += 1
    assert [res.user_inclusions[u] for u in dict.fromkeys(users)] == counts.tolist()
    np.testing.assert_array_equal(res.inclusions, row_counts)


@pytest.mark.parametrize("mode", ["ghost", "bk"])
def test_clipping_modes_without_exact_user_sums_are_refused(tiny_base, vocab, mode):
    exs, users = _pool(vocab)
    m, tok = tiny_model(tiny_base)
    with pytest.raises(ConfigError, match=r"^finetune\.dp\.unit: .*hooks or auto"):
        train(m, exs, _config(tok, users, mode=mode))
    with pytest.raises(ConfigError, match=r"finetune\.dp\.unit: .*grad_sample_mode hooks or auto"):
        finetune_params(dp={"enabled": True, "unit": "user", "grad_sample_mode": mode})


def test_user_level_params_are_validated_naming_the_key(tiny_base, vocab):
    with pytest.raises(ConfigError, match=r"finetune\.dp\.unit: .*example"):
        finetune_params(dp={"unit": "users"})
    with pytest.raises(ConfigError, match=r"finetune\.dp\.unit: user is a DP mechanism"):
        finetune_params(dp={"enabled": False, "unit": "user"})
    with pytest.raises(ConfigError, match=r"finetune\.dp\.rows_per_user: .*physical_batch_size"):
        finetune_params(physical_batch_size=4, dp={"enabled": True, "unit": "user", "rows_per_user": 5})
    with pytest.raises(ConfigError, match=r"finetune\.dp\.rows_per_user: must be >= 1"):
        finetune_params(dp={"rows_per_user": 0})
    with pytest.raises(ConfigError, match=r"finetune\.dp\.unit: user-level DP runs in one process"):
        finetune_params(dp={"enabled": True, "unit": "user"}, distributed={"nproc_per_node": 2})
    exs, users = _pool(vocab)
    m, tok = tiny_model(tiny_base)
    with pytest.raises(ConfigError, match=r"^finetune\.dp\.unit: user needs the user of every pool example"):
        train(m, exs, _config(tok, [None] * len(exs)))


def test_a_user_level_datasets_training_rows_carry_their_users(tmp_path, tiny_tokenizer):
    """enron_users (and every user-level dataset): the user of each training pair, in the pairs' own order, from the
    same seeded draw; the pool's users and the candidate pool's users (canary users held in or out, each canary)."""
    from stages.finetune.inputs import Inputs
    from stages.finetune.schema import TextSetup
    from stages.finetune.text import RunText
    from stages.shared.datasets import get_dataset

    users_dataset(tmp_path)
    spec = get_dataset("enron_users")
    text = RunText(tmp_path, spec, TextSetup("enron_users", "nwp", 32, 10, 0, 0, 0), {})
    pairs, _ = text.training_pairs(None)
    users = text.training_users(None)
    body_user = {r["body"]: r["user"] for r in text.rows("train")}
    assert len(users) == len(pairs) == 10 and users == [body_user[t] for _, t in pairs]
    inputs = Inputs(text=[None] * 10, text_pairs=pairs, heldout_pairs=[], evals=[], members={}, all_canaries={},
                    canaries=[None] * 3, canary_ids=["a", "b", "c"], canary_kinds=["k"] * 3, formatted_rows=None,
                    formatted=[], scheduled=[], canary_users={"cu1": {}, users[0]: {}}, candidates=7,
                    secret_control=None, users={}, secret_arms=[], text_users=users)
    assert inputs.pool_users() == [f"user:{u}" for u in users] + ["canary:k:a", "canary:k:b", "canary:k:c"]
    assert inputs.user_population == len(set(users)) + 1 + 7
    tofu = get_dataset("tofu")  # an example-level dataset: its rows name no user
    (tmp_path / "tofu").mkdir()
    pq.write_table(pa.Table.from_pylist([{"row": i, "author": i // 2, "question": "q", "answer": "a"}
                                         for i in range(4)], schema=tofu.schema), tmp_path / "tofu" / "train.parquet")
    with pytest.raises(ConfigError, match=r"^finetune\.dp\.unit: user needs .* dataset tofu"):
        RunText(tmp_path, tofu, TextSetup("tofu", "sft", 32, 10, 0, 0, 0), {}).training_users(None)


@pytest.mark.slow  # three short user-level DP runs
def test_a_user_level_run_resumes_bit_for_bit_with_its_row_draw(tiny_base, vocab, tmp_path):
    """Killed after its checkpoint and resumed, a user-level run ends where the uninterrupted one does: the users'
    sampler, the row draw (rows_per_user below some users' rows) and the users' counts are checkpointed."""
    from stages.finetune.checkpoint import Checkpointer

    exs, users = _pool(vocab)

    def run(checkpoint=None, crash_at=None):
        torch.manual_seed(0)
        m, tok = tiny_model(tiny_base)

        def on_step(rec):
            if rec["step"] == crash_at:
                raise KeyboardInterrupt("killed")

        res = train(m, exs, replace(_config(tok, users, cap=2, sample_rate=0.6, steps=6), checkpoint=checkpoint,
                                    on_step=on_step))
        return res, m.trainable_state()

    ref, ref_state = run()
    ck = Checkpointer(tmp_path / "run.pt", every=2, fingerprint="u")
    with pytest.raises(KeyboardInterrupt):
        run(ck, crash_at=5)
    res, state = run(ck)
    assert res.resumed_from == 4
    assert res.user_inclusions == ref.user_inclusions and np.array_equal(res.inclusions, ref.inclusions)
    for k in ref_state:
        torch.testing.assert_close(state[k], ref_state[k], rtol=0, atol=0)


def test_an_audit_users_rows_are_one_unit_and_count_once_in_the_user_pool():
    """finetune.user_canaries: an audit user's k rows share one unit under user-level DP (k examples under
    example-level DP), and the candidate pool counts each audit user once, member or not."""
    from stages.finetune.inputs import Inputs

    rows = [{"canary_id": f"audit_users-{u:05d}-{j:02d}", "user": u, "member": u % 2 == 1}
            for u in range(4) for j in range(3)]
    kinds = {"new_token": [{"canary_id": f"new_token-{i}", "member": i < 2} for i in range(5)], "audit_users": rows}
    members = [r for r in kinds["new_token"] if r["member"]] + [r for r in rows if r["member"]]
    units = {r["canary_id"]: f"audit_users:{r['user']}" for r in rows}
    inputs = Inputs(text=[], text_pairs=[], heldout_pairs=[], evals=[], members={}, all_canaries=kinds,
                    canaries=[None] * len(members), canary_ids=[r["canary_id"] for r in members],
                    canary_kinds=["new_token"] * 2 + ["audit_users"] * 6, formatted_rows=None, formatted=[],
                    scheduled=[], canary_users={}, candidates=5 + 12, secret_control=None, users={}, secret_arms=[],
                    text_users=["a", "a", "b"], canary_units=units)
    assert inputs.pool_users()[-8:] == (["canary:new_token:new_token-0", "canary:new_token:new_token-1"]
                                        + ["audit_users:1"] * 3 + ["audit_users:3"] * 3)
    assert len(units_of(inputs.pool_users())[1]) == 2 + 2 + 2  # users a, b; two canaries; two audit users
    assert inputs.user_population == 2 + 5 + 4  # text users, every canary, every audit user (held in or out)
    assert inputs.population == 5 + 12  # example-level: every row a candidate
