"""The self-check's probe: its random streams are named and derived like the pipeline's (stages/shared/core/seeds.py),
so the
weight initialisation and the canary directions are two streams, never one integer; and the transformer probe's
loss is the mean over its labelled positions (a masked prompt, as in SFT), the function its scores read."""
import numpy as np
import torch

from stages.finetune.loss import per_sample_losses
from stages.shared.core.seeds import DERIVATION, Stream
from stages.shared.lm.batching import collate
from stages.tools.selfcheck.probe import DIRECTIONS, INIT, LORA_INIT, ProbeLM, TransformerProbe

PROBE_STREAMS = (INIT, LORA_INIT, DIRECTIONS)


def test_the_init_and_canary_direction_streams_differ_for_the_same_seed():
    """For every seed the three streams give three different seeds, none the raw seed, and no seed of one stream is
    another stream's at a nearby seed (no seed + k coupling)."""
    assert DERIVATION == "seedsequence-v1" and all(isinstance(s, Stream) for s in PROBE_STREAMS)
    assert len({s.name for s in PROBE_STREAMS}) == 3
    seeds = range(0, 101)
    drawn = {(s.name, k): s.int_seed(k) for s in PROBE_STREAMS for k in seeds}
    assert len(set(drawn.values())) == len(drawn)  # no two (stream, seed) pairs share a seed
    assert not set(drawn.values()) & set(seeds)
    for k in (0, 7, 2000):
        assert INIT.int_seed(k) != DIRECTIONS.int_seed(k)
        a = torch.randn(8, generator=torch.Generator().manual_seed(INIT.int_seed(k)))
        b = torch.randn(8, generator=torch.Generator().manual_seed(DIRECTIONS.int_seed(k)))
        assert not torch.allclose(a, b)  # the draws themselves differ, not only the integers


def test_the_linear_probe_draws_its_directions_from_their_own_stream():
    """x0 and a_rows are the first draws of the directions stream, whatever torch's global RNG (the init stream)
    holds; a probe built after seeding torch with the raw seed or with the init stream has the same directions."""
    seed, d = 5, 2
    gen = torch.Generator().manual_seed(DIRECTIONS.int_seed(seed))
    x0 = torch.nn.functional.normalize(torch.randn(d, generator=gen), dim=0)
    a_rows = torch.nn.functional.normalize(torch.randn(d, generator=gen), dim=0)
    for torch_seed in (seed, INIT.int_seed(seed)):
        torch.manual_seed(torch_seed)
        model = ProbeLM(20, "lora", d=d, seed=seed)
        torch.testing.assert_close(model.x0, x0, rtol=0, atol=0)
        torch.testing.assert_close(model.a_rows, a_rows, rtol=0, atol=0)
    raw = torch.nn.functional.normalize(torch.randn(d, generator=torch.Generator().manual_seed(seed)), dim=0)
    assert not torch.allclose(model.x0, raw)  # no longer the raw seed's draw


def test_the_transformer_probe_loss_is_the_mean_over_its_labelled_positions():
    """The first PROMPT positions are masked (-100): the training loss of canary i is -scale x s_i with s_i the
    mean own logit over the other positions, the function ``own_scores`` (and so the recorded direction) reads."""
    model = TransformerProbe(12, seed=3)
    examples = model.examples()
    batch = collate(examples, 0, torch.device("cpu"))
    positions = batch["input_ids"].shape[1]
    labelled = np.bincount(batch["rows"].numpy(), minlength=len(examples))
    assert (labelled == positions - TransformerProbe.PROMPT).all() and TransformerProbe.PROMPT >= 1
    with torch.no_grad():
        losses = per_sample_losses(model, batch)
        torch.testing.assert_close(losses, -model.scale * model.own_scores(0, 12), rtol=1e-5, atol=1e-4)
