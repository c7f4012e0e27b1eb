"""The per-example membership attacks on one cached pass: EZ-MIA and Min-K%++ beside the 2023 family, per user as
user inference aggregates, RMIA's reducer, and the count of the fine-tuned model's forward passes."""
from dataclasses import replace

import numpy as np
import pytest
import torch
from testkit.models import tiny_canary_lm
from testkit.project import params, project_raw
from testkit.records import run_record

from stages.attack.catalog import ATTACKS
from stages.attack.context import AttackContext, Item
from stages.attack.params import PER_EXAMPLE_SCORES, AttackParams
from stages.attack.rmia import rmia_scores
from stages.attack.scores import PER_EXAMPLE, ratio_scores
from stages.attack.user_inference import user_scores
from stages.audit.roc import auroc
from stages.shared.core.artifacts import locations
from stages.shared.core.errors import ConfigError
from stages.shared.datasets import get_dataset
from stages.shared.lm.batching import chunks
from stages.shared.lm.examples import make_example


@pytest.fixture()
def ctx(tiny_base):
    """An attack context on a users dataset whose items (12 text rows, 4 users x 3 samples) and models (two tiny
    CanaryLMs) are set in place of a run's: the attacks read them exactly as a run's."""
    raw = project_raw()
    raw["model"]["out"] = str(tiny_base)
    record = run_record(params_overrides={"dataset": "enron_users", "objective": "nwp"}, has_canaries=False,
                        num_new_tokens=0)
    c = AttackContext("r1", params(AttackParams, "attack", batch_size=4, ez_min_errors=1), locations(raw), record,
                      get_dataset("enron_users"), device=torch.device("cpu"))
    torch.manual_seed(0)
    c._target, c.tok = tiny_canary_lm(tiny_base)
    torch.manual_seed(1)
    c._reference, _ = tiny_canary_lm(tiny_base)
    rng = np.random.default_rng(0)

    def ex(n):
        return make_example([1], rng.integers(3, 300, n).tolist(), "nwp", "test")

    c._items = {
        "text": [Item(f"t{i}", "text", bool(i % 2), ex(5 + i % 7), f"row {i}") for i in range(12)],
        "users": [Item(f"u{u}-{j}", "users", bool(u % 2), ex(4 + j), f"u{u} {j}", user=f"u{u}")
                  for u in range(4) for j in range(3)],
    }
    return c


def test_no_attack_adds_a_forward_pass_of_the_fine_tuned_model(ctx):
    """Every per-example attack (2023's and EZ-MIA, Min-K%++) and user inference on text rows and users: the
    fine-tuned model runs once per length-bucketed chunk of the items, as for the loss alone."""
    calls = []
    ctx.target_model.register_forward_hook(lambda *a: calls.append(1))
    items = ctx.items("text") + ctx.items("users")
    ctx.precompute(["text", "users"], reference=True)
    one_pass = len(chunks(range(len(items)), [len(it.example) for it in items], 4))
    assert len(calls) == one_pass
    for name in [*PER_EXAMPLE, "user_inference"]:
        ATTACKS.get(name).run(ctx, ctx.params)
    assert len(calls) == one_pass


def test_per_example_attacks_score_users_as_user_inference_does(ctx):
    """Each per-example attack's users rows are its score averaged over a user's samples; user inference takes its
    per-example score from attack.user_score (default ref_ratio: Kandpal et al.'s statistic)."""
    items = ctx.items("users")
    assert ctx.params.user_score == "ref_ratio"
    default = ATTACKS.get("user_inference").run(ctx, ctx.params).to_pylist()
    want = user_scores([it.user for it in items], ctx.target(items), ctx.reference(items))
    assert {r["item_id"]: r["score"] for r in default} == pytest.approx(want, abs=1e-9)
    for name in PER_EXAMPLE:
        rows = [r for r in ATTACKS.get(name).run(ctx, ctx.params).to_pylist() if r["group"] == "users"]
        per = PER_EXAMPLE[name](ctx, items, ctx.params)
        assert {r["item_id"]: r["score"] for r in rows} == pytest.approx(
            {u: float(np.mean([s for it, s in zip(items, per) if it.user == u])) for u in ("u0", "u1", "u2", "u3")})
        chosen = ATTACKS.get("user_inference").run(ctx, replace(ctx.params, user_score=name)).to_pylist()
        assert [(r["item_id"], r["score"]) for r in chosen] == [(r["item_id"], r["score"]) for r in rows]


def test_user_score_names_its_key():
    assert set(PER_EXAMPLE_SCORES) == set(PER_EXAMPLE)
    with pytest.raises(ConfigError, match=r"attack\.user_score: must be one of loss, ref_ratio"):
        params(AttackParams, "attack", user_score="lira")


def test_rmia_with_one_reference_is_the_reference_ratio():
    """Offline RMIA with one reference model and a = 1 is log p_target(x) - log p_ref(x): with the base model as the
    reference, ref_ratio's scores (hence its ranking); a < 1 and a second reference change the ranking."""
    rng = np.random.default_rng(0)
    target = [rng.normal(-3, 1, n) for n in rng.integers(2, 20, 200)]
    ref = [t + rng.normal(0, 1, len(t)) for t in target]
    np.testing.assert_allclose(rmia_scores(target, [ref], 1.0), ratio_scores(target, ref), rtol=1e-12)
    assert (np.argsort(rmia_scores(target, [ref], 1.0)) == np.argsort(ratio_scores(target, ref))).all()
    assert not (np.argsort(rmia_scores(target, [ref], 0.3)) == np.argsort(ratio_scores(target, ref))).all()
    other = [t + rng.normal(0, 1, len(t)) for t in target]
    mean = [np.log((np.exp(a) + np.exp(b)) / 2) for a, b in zip(ref, other)]
    np.testing.assert_allclose(rmia_scores(target, [ref, other], 1.0), ratio_scores(target, mean), rtol=1e-12)


def test_rmia_separates_members_its_references_never_saw():
    """Members' tokens are likelier under the target than under references trained without them; non-members' are
    not: RMIA ranks members first."""
    rng = np.random.default_rng(1)
    member = rng.random(400) < 0.5
    refs = [[rng.normal(-3, 0.3, 10) for _ in member] for _ in range(2)]
    target = [(r0 + r1) / 2 + (0.4 if m else 0.0) + rng.normal(0, 0.3, 10) for r0, r1, m in zip(*refs, member)]
    assert auroc(rmia_scores(target, refs, 0.3), member) > 0.9
