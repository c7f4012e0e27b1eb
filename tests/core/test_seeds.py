"""The named random streams reproduce, exactly, the seed recipes the code used before they were named."""
import hashlib
import zlib

import numpy as np
import pytest

from stages.core.errors import ConfigError
from stages.core.seeds import STREAMS, stream

#: stream -> (params seed, key) -> the seed material the code used before (``seed + 1``, ``[seed, 17]``, ...)
LEGACY = {
    "datasets.enron_users.rows": lambda s, k: s,
    "datasets.enron_users.users": lambda s, k: s,
    "datasets.text.user_rows": lambda s, k: [s, 1],  # new with user_level: distinct from the dataset's split seed
    "datasets.text.users": lambda s, k: s + 2,
    "datasets.text.max_users": lambda s, k: [s, 3],  # new with user_level.max_users
    "canaries.kind": lambda s, k: [s, zlib.crc32(k.encode())],
    "canaries.formatted": lambda s, k: [s, zlib.crc32(k.encode()), 7],
    "canaries.users": lambda s, k: s,
    "canaries.user_substring": lambda s, k: int(hashlib.sha1(k.encode()).hexdigest()[:12], 16),
    "finetune.init": lambda s, k: s,
    "finetune.noise": lambda s, k: s + 1,
    "finetune.eval_rows": lambda s, k: s + 1,
    "finetune.sampler": lambda s, k: s,
    "finetune.schedule": lambda s, k: [s, 17],
    "finetune.secret_control": lambda s, k: s,
    "finetune.export_order": lambda s, k: s,
    "finetune.selfcheck.members": lambda s, k: [s, 1],
    "finetune.heldout_rows": lambda s, k: s + 7,
    "attack.eia.aux": lambda s, k: s + 11,
    "attack.eia.test": lambda s, k: s + 13,
    "lm.prompt_init": lambda s, k: 1234,
    "audit.selfcheck.ideal": lambda s, k: 0,
    "variance.jitter": lambda s, k: 0,
}


def _args(st, seed, key):
    return (None if st.fixed is not None or st.keyed == "sha1" else seed), (key if st.keyed else None)


@pytest.mark.parametrize("name", sorted(LEGACY))
@pytest.mark.parametrize("seed,key", [(0, "new_token"), (3, "random"), (41, "email"), (7, "<m1@x>")])
def test_each_stream_is_its_legacy_recipe(name, seed, key):
    st = stream(name)
    s, k = _args(st, seed, key)
    want = LEGACY[name](seed, key)
    assert st.entropy(s, k) == want
    assert np.array_equal(st.numpy(s, k).random(5), np.random.default_rng(want).random(5))


def test_every_stream_is_pinned():
    assert sorted(STREAMS.names()) == sorted(LEGACY)


def test_misuse_is_refused():
    with pytest.raises(ValueError, match="needs a key"):
        stream("canaries.kind").entropy(0)
    with pytest.raises(ValueError, match="needs its params seed"):
        stream("finetune.noise").entropy()
    with pytest.raises(ValueError, match="has a fixed seed"):
        stream("lm.prompt_init").entropy(5)
    with pytest.raises(ValueError, match="not one integer"):
        stream("finetune.schedule").int_seed(0)
    with pytest.raises(ConfigError, match=r"unknown random stream 'nope' \(known: attack\.eia\.aux"):
        stream("nope")


def test_converted_call_sites_draw_as_before():
    from stages.canaries.kinds import kind_rng
    from stages.lm.canary_lm import PROMPT_INIT_SEED

    assert np.array_equal(kind_rng(5, "random").random(4),
                          np.random.default_rng([5, zlib.crc32(b"random")]).random(4))
    assert PROMPT_INIT_SEED == 1234
