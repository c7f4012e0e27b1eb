"""Ghost clipping and book-keeping (bk) against opacus' per-example gradients (hooks) on a tiny Llama, for every
paradigm: one DP step with noise off gives the same clipped, summed gradient; with noise the accountant's epsilon
is the same."""
import pytest
import torch
from testkit.models import canary_rows, dp_params, one_dp_step
from testkit.models import tiny_canary_lm as tiny_model

from stages.finetune.loop import TrainConfig, train
from stages.finetune.privacy.engine import make_private
from stages.finetune.privacy.strategies import STRATEGIES, get_strategy, resolve
from stages.shared.core.errors import ConfigError
from stages.shared.lm.examples import canary_examples

CPU = torch.device("cpu")
PARADIGMS = [("lora", False), ("full", False), ("prompt", False), ("prefix", False), ("full", True), ("lora", True)]


@pytest.mark.parametrize("mode", ["ghost", "bk"])
@pytest.mark.parametrize("paradigm,embeddings", PARADIGMS)
def test_ghost_and_hooks_give_the_same_clipped_sum(tiny_base, paradigm, embeddings, mode):
    for clip in (1e-2, 1e3):  # every example clipped / none clipped
        ghost, *_ = one_dp_step(tiny_base, mode, clip, False, paradigm, embeddings)
        hooks, *_ = one_dp_step(tiny_base, "hooks", clip, False, paradigm, embeddings)
        assert ghost.keys() == hooks.keys()
        if embeddings:
            assert any(n.endswith("embed_tokens.weight") for n in ghost) and any(n.endswith("lm_head.weight")
                                                                                 for n in ghost)
        for n in ghost:  # fp32 sums in another order: tolerance relative to the tensor's scale
            atol = max(1e-7, 1e-5 * float(hooks[n].abs().max()))
            torch.testing.assert_close(ghost[n], hooks[n], rtol=1e-4, atol=atol, msg=f"{paradigm} {n} clip {clip}")
        total = torch.sqrt(sum((g ** 2).sum() for g in ghost.values()))
        assert total > 0


@pytest.mark.slow  # two whole noisy DP training runs
def test_noisy_ghost_and_hooks_runs_spend_the_same_epsilon(tiny_base):
    out = {}
    for mode in ("ghost", "bk", "hooks"):
        torch.manual_seed(0)
        m, tok = tiny_model(tiny_base)
        res = train(m, canary_examples(canary_rows(m.base_vocab, 12), "sft"), TrainConfig(
            steps=3, batch_size=4, physical_batch_size=3, lr=1e-2, weight_decay=0.0, clip_norm=1.0, seed=0,
            pad_id=tok.pad_token_id, dp=dp_params(enabled=True, epsilon=4.0, delta=1e-5, grad_sample_mode=mode)))
        out[mode] = res.privacy
    assert [out[k].grad_sample_mode for k in out] == list(out)
    for key in ("epsilon_spent", "noise_multiplier", "accounted_steps", "profile"):
        assert getattr(out["ghost"], key) == getattr(out["hooks"], key) == getattr(out["bk"], key), key


@pytest.mark.parametrize("mode", ["ghost", "bk"])
def test_ghost_refuses_a_module_without_norm_sampler_and_auto_falls_back_to_hooks(tiny_base, mode):
    torch.manual_seed(0)
    m, tok = tiny_model(tiny_base)
    m.extra = torch.nn.Bilinear(2, 2, 2)
    strategy, why = resolve(m, "auto")
    assert strategy.name == "hooks" and why == "ghost and bk have no norm sampler for extra (Bilinear)"
    params = [p for p in m.parameters() if p.requires_grad]
    with pytest.raises(ConfigError, match=r"finetune.dp.grad_sample_mode: ghost clipping has no norm sampler for "
                                          r"extra \(Bilinear\); use 'hooks'"):
        make_private(m, torch.optim.SGD(params, lr=1.0), dp_params(enabled=True, grad_sample_mode=mode),
                     sample_rate=0.5, steps=1, population=8, seed=0, optimizer_name="sgd", device=CPU)


def test_strategies_are_registered_once_and_a_miss_lists_them():
    assert STRATEGIES.names() == ["bk", "ghost", "ghost_fsdp", "hooks"]
    assert [get_strategy(n).name for n in STRATEGIES.names()] == STRATEGIES.names()
    assert get_strategy("bk").norm_pass and get_strategy("ghost").norm_pass and not get_strategy("hooks").norm_pass
    assert get_strategy("ghost_fsdp").sharded and not any(get_strategy(n).sharded for n in ("bk", "ghost", "hooks"))
    with pytest.raises(ValueError, match="already registered"):
        STRATEGIES.register("ghost")(get_strategy("hooks"))
    with pytest.raises(ConfigError, match=r"finetune.dp.grad_sample_mode: unknown grad-sample mode 'fast' "
                                          r"\(known: bk, ghost, ghost_fsdp, hooks\)"):
        get_strategy("fast")


@pytest.mark.parametrize("paradigm,embeddings", [("lora", False), ("prompt", False), ("full", False), ("lora", True)])
def test_auto_mode_picks_bookkeeping_where_every_module_has_a_closed_form(tiny_base, paradigm, embeddings):
    torch.manual_seed(0)
    m, _ = tiny_model(tiny_base, paradigm=paradigm, virtual_tokens=3, train_embeddings=embeddings)
    assert resolve(m, "auto") == (get_strategy("bk"), None)
    assert resolve(m, "hooks")[0].name == "hooks" and resolve(m, "ghost")[0].name == "ghost"


class Scale(torch.nn.Module):
    """A layer with a norm sampler (registered below) but no book-keeping form."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(2))


def test_bookkeeping_refuses_a_module_without_a_clipped_sum_form_and_auto_falls_back(tiny_base):
    from opacus.grad_sample import register_norm_sampler

    register_norm_sampler(Scale)(lambda layer, a, g: {layer.weight: g.reshape(len(g), -1).norm(dim=-1)})
    torch.manual_seed(0)
    m, tok = tiny_model(tiny_base)
    m.extra = Scale()
    assert resolve(m, "auto")[0].name == "ghost"
    assert resolve(m, "auto")[1] == "bk has no clipped-sum form for extra (Scale)"
    params = [p for p in m.parameters() if p.requires_grad]
    with pytest.raises(ConfigError, match=r"finetune.dp.grad_sample_mode: book-keeping has no clipped-sum form for "
                                          r"extra \(Scale\); use 'ghost'"):
        make_private(m, torch.optim.SGD(params, lr=1.0), dp_params(enabled=True, grad_sample_mode="bk"),
                     sample_rate=0.5, steps=1, population=8, seed=0, optimizer_name="sgd", device=CPU)
