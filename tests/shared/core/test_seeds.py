"""Every named random stream derives from (seed, name[, key]) through one SeedSequence: no two streams of any two
seeds coincide (the ``seed + offset`` recipes before made seed s's DP noise seed s+1's initialisation)."""
import itertools
import zlib

import numpy as np
import pytest

from stages.shared.core.errors import ConfigError
from stages.shared.core.seeds import DERIVATION, STREAMS, stream

KEYS = ("new_token", "random", "email")


def _draws(seeds):
    """(stream, seed, key) -> (first numpy double, int_seed) for every stream, seeds and keys."""
    out = {}
    for name in STREAMS.names():
        st = stream(name)
        seed_args = [None] if st.fixed is not None or st.keyed == "sha1" else list(seeds)
        key_args = KEYS if st.keyed else [None]
        for s, k in itertools.product(seed_args, key_args):
            out[(name, s, k)] = (float(st.numpy(s, k).random()), st.int_seed(s, k))
    return out


@pytest.mark.parametrize("base", [0, 3104, 3201])
def test_first_draws_of_every_stream_differ_across_seeds(base):
    """A necessary check (two coinciding streams would share their first draw), not a proof of independence."""
    draws = _draws(range(base, base + 101))
    firsts = [d[0] for d in draws.values()]
    ints = [d[1] for d in draws.values()]
    assert len(set(firsts)) == len(firsts), "two (stream, seed, key) share a first draw"
    assert len(set(ints)) == len(ints), "two (stream, seed, key) share an integer seed"
    assert len(draws) > 25 * 101


def test_every_stream_has_its_own_seedsequence_input():
    """What the derivation's distinctness rests on, checked exactly: no two registered names (nor keys) share a CRC-32,
    so distinct (seed, name, key) triples give SeedSequence distinct (entropy, spawn key) inputs. (That SeedSequence
    turns distinct inputs into unrelated streams is numpy's design; the first-draw test above is a necessary check.)"""
    names = list(STREAMS.names())
    assert len({zlib.crc32(n.encode()) for n in names}) == len(names)
    assert len({zlib.crc32(k.encode()) for k in KEYS}) == len(KEYS)
    inputs = set()
    for name in names:
        st = stream(name)
        seeds = [None] if st.fixed is not None or st.keyed == "sha1" else range(3100, 3120)
        for s, k in itertools.product(seeds, KEYS if st.keyed else [None]):
            seq = st.sequence(s, k)
            inputs.add((seq.entropy, tuple(seq.spawn_key)))
    count = sum((1 if stream(n).fixed is not None or stream(n).keyed == "sha1" else 20)
                * (len(KEYS) if stream(n).keyed else 1) for n in names)
    assert len(inputs) == count  # one input per (stream, seed, key): none shared


def test_noise_of_a_seed_is_not_the_next_seeds_initialisation():
    """The review's case: replicas at consecutive seeds (3104, 3105, 3106)."""
    import torch

    for s in (3104, 3105, 3201):
        noise = torch.Generator().manual_seed(stream("finetune.noise").int_seed(s)).initial_seed()
        init = torch.Generator().manual_seed(stream("finetune.init").int_seed(s + 1)).initial_seed()
        assert noise != init
        assert stream("finetune.eval_rows").int_seed(s) != stream("finetune.sampler").int_seed(s + 1)
        assert stream("finetune.text_rows").int_seed(s) != stream("finetune.sampler").int_seed(s)


def test_the_derivation_is_seedsequence_of_seed_and_name():
    st = stream("canaries.kind")
    want = np.random.SeedSequence(7, spawn_key=(zlib.crc32(b"canaries.kind"), zlib.crc32(b"random")))
    assert np.array_equal(st.numpy(7, "random").random(4), np.random.default_rng(want).random(4))
    assert 0 <= stream("finetune.noise").int_seed(2 ** 40) < 2 ** 63
    assert DERIVATION == "seedsequence-v1"


def test_misuse_is_refused():
    with pytest.raises(ValueError, match="needs a key"):
        stream("canaries.kind").sequence(0)
    with pytest.raises(ValueError, match="takes no key"):
        stream("finetune.noise").sequence(0, "x")
    with pytest.raises(ValueError, match="needs its params seed"):
        stream("finetune.noise").sequence()
    with pytest.raises(ValueError, match="has a fixed seed"):
        stream("lm.prompt_init").sequence(5)
    with pytest.raises(ValueError, match="negative"):
        stream("finetune.noise").sequence(-1)
    with pytest.raises(ConfigError, match=r"unknown random stream 'nope' \(known: attack\.eia\.aux"):
        stream("nope")


def test_converted_call_sites_draw_from_their_stream():
    from stages.canaries.kinds import kind_rng
    from stages.shared.lm.canary_lm import PROMPT_INIT_SEED

    assert np.array_equal(kind_rng(5, "random").random(4), stream("canaries.kind").numpy(5, "random").random(4))
    assert PROMPT_INIT_SEED == stream("lm.prompt_init").int_seed()
