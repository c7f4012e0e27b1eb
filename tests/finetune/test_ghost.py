"""Ghost clipping and book-keeping (bk) against opacus' per-example gradients (hooks) on a tiny Llama, for every
paradigm: one DP step with noise off gives the same clipped, summed gradient; with noise the accountant's epsilon
is the same."""
import numpy as np
import pytest
import torch

from stages.core.errors import ConfigError
from stages.finetune.dp import make_private
from stages.finetune.loop import TrainConfig, dp_step, per_sample_losses, train
from stages.finetune.strategies import STRATEGIES, get_strategy, resolve
from stages.lm.batching import chunks, collate
from stages.lm.examples import canary_examples

from .test_loop import _canaries, dp_params, tiny_model

CPU = torch.device("cpu")
PARADIGMS = [("lora", False), ("full", False), ("prompt", False), ("prefix", False), ("full", True), ("lora", True)]


def _examples(m):
    from . import test_loop

    test_loop.VOCAB = m.base_vocab
    return canary_examples(_canaries(12), "sft")


def one_step(tiny_base, mode: str, clip: float, noise: bool, paradigm: str, embeddings: bool):
    """Parameter change of one DP-SGD step (lr 1) over 8 examples in chunks of 3: minus the gradient."""
    torch.manual_seed(0)
    m, tok = tiny_model(tiny_base, paradigm=paradigm, virtual_tokens=3, train_embeddings=embeddings)
    exs = _examples(m)
    before = {n: p.detach().clone() for n, p in m.named_parameters() if p.requires_grad}
    params = [p for p in m.parameters() if p.requires_grad]
    dp = dp_params(enabled=True, epsilon=8.0, delta=1e-5, grad_sample_mode=mode, max_grad_norm=clip)
    private = make_private(m, torch.optim.SGD(params, lr=1.0), dp, sample_rate=0.5, steps=1, population=8,
                           seed=0, optimizer_name="sgd", device=CPU)
    if not noise:
        private.optimizer.noise_multiplier = 0.0
    parts = chunks(np.arange(8), [len(e) for e in exs], 3)
    m.keep_input = private.strategy.norm_pass
    private.net.train()
    dp_step(private, params, exs, parts, tok.pad_token_id, CPU)
    return {n: before[n] - p.detach() for n, p in m.named_parameters() if p.requires_grad}, m, exs, tok


@pytest.mark.parametrize("mode", ["ghost", "bk"])
@pytest.mark.parametrize("paradigm,embeddings", PARADIGMS)
def test_ghost_and_hooks_give_the_same_clipped_sum(tiny_base, paradigm, embeddings, mode):
    for clip in (1e-2, 1e3):  # every example clipped / none clipped
        ghost, *_ = one_step(tiny_base, mode, clip, False, paradigm, embeddings)
        hooks, *_ = one_step(tiny_base, "hooks", clip, False, paradigm, embeddings)
        assert ghost.keys() == hooks.keys()
        if embeddings:
            assert any(n.endswith("embed_tokens.weight") for n in ghost) and any(n.endswith("lm_head.weight")
                                                                                 for n in ghost)
        for n in ghost:
            torch.testing.assert_close(ghost[n], hooks[n], rtol=1e-4, atol=1e-7, msg=f"{paradigm} {n} clip {clip}")
        total = torch.sqrt(sum((g ** 2).sum() for g in ghost.values()))
        assert total > 0


@pytest.mark.parametrize("mode", ["ghost", "bk", "hooks"])
@pytest.mark.parametrize("paradigm,embeddings", [("lora", False), ("full", True)])
def test_unclipped_dp_gradient_is_the_plain_gradient(tiny_base, mode, paradigm, embeddings):
    """With clipping that never binds and no noise, the DP step is the plain gradient of the summed loss over
    the expected batch: every layer's per-example gradient is counted exactly once."""
    delta, _, exs, tok = one_step(tiny_base, mode, 1e6, False, paradigm, embeddings)
    torch.manual_seed(0)
    ref, _ = tiny_model(tiny_base, paradigm=paradigm, virtual_tokens=3, train_embeddings=embeddings)
    ref.train()
    loss = per_sample_losses(ref, collate(exs[:8], tok.pad_token_id, CPU)).sum() / 4  # expected batch 0.5 * 8
    loss.backward()
    grads = {n: p.grad for n, p in ref.named_parameters() if p.requires_grad}
    for n, g in grads.items():
        torch.testing.assert_close(delta[n], g, rtol=1e-4, atol=1e-7, msg=n)


@pytest.mark.slow  # two whole noisy DP training runs
def test_noisy_ghost_and_hooks_runs_spend_the_same_epsilon(tiny_base):
    out = {}
    for mode in ("ghost", "bk", "hooks"):
        torch.manual_seed(0)
        m, tok = tiny_model(tiny_base)
        res = train(m, _examples(m), TrainConfig(
            steps=3, batch_size=4, physical_batch_size=3, lr=1e-2, weight_decay=0.0, clip_norm=1.0, seed=0,
            pad_id=tok.pad_token_id, dp=dp_params(enabled=True, epsilon=4.0, delta=1e-5, grad_sample_mode=mode)))
        out[mode] = res.privacy
    assert [out[k]["grad_sample_mode"] for k in out] == list(out)
    for key in ("epsilon_spent", "noise_multiplier", "accounted_steps", "profile"):
        assert out["ghost"][key] == out["hooks"][key] == out["bk"][key], key


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
    assert STRATEGIES.names() == ["bk", "ghost", "hooks"]
    assert [get_strategy(n).name for n in STRATEGIES.names()] == STRATEGIES.names()
    assert get_strategy("bk").norm_pass and get_strategy("ghost").norm_pass and not get_strategy("hooks").norm_pass
    with pytest.raises(ValueError, match="already registered"):
        STRATEGIES.register("ghost")(get_strategy("hooks"))
    with pytest.raises(ConfigError, match=r"finetune.dp.grad_sample_mode: unknown grad-sample mode 'fast' "
                                          r"\(known: bk, ghost, hooks\)"):
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
