"""The named random streams of the pipeline: which seed each generator starts from, declared in one place.

A stream is a params seed (``<section>.seed``) turned into a generator's seed material by a fixed recipe:
``seed + offset`` (an integer), optionally followed by words (``default_rng([seed + offset, crc32(key), *words])``),
or a constant (``fixed``) where no params seed exists, or the key's SHA-1 alone (``keyed="sha1"``). The recipes
reproduce, exactly, the offsets the code used before they were named (``seed + 1``, ``[seed, 17]``, ...), so every
computed number is unchanged; a test pins each recipe. Use ``stream(name).numpy(seed, key=...)`` for a numpy
Generator and ``stream(name).int_seed(seed)`` for ``torch.Generator().manual_seed``.

Streams of one seed are distinct by recipe (a new stream takes a fresh offset or word: look here first), except
where noted: ``finetune.noise`` and ``finetune.eval_rows`` share ``seed + 1`` but feed a torch and a numpy
generator, whose sequences are unrelated.
"""
from __future__ import annotations

import hashlib
import zlib
from dataclasses import dataclass
from typing import Literal

import numpy as np

from .registry import Registry


@dataclass(frozen=True)
class Stream:
    name: str
    #: what the stream draws, and the params key of its seed
    what: str
    #: added to the params seed (``seed + offset``)
    offset: int = 0
    #: "crc32": a word ``zlib.crc32(key)`` follows the seed (one independent stream per key: adding a key leaves
    #: the others unchanged) | "sha1": the seed is ``int(sha1(key)[:12], 16)``, no params seed
    keyed: Literal["crc32", "sha1"] | None = None
    #: further entropy words after the seed (and the key's word)
    words: tuple[int, ...] = ()
    #: a constant seed (the stream has no params seed)
    fixed: int | None = None

    def entropy(self, seed: int | None = None, key: str | None = None) -> int | list[int]:
        """The seed material: an int, or the word list ``np.random.default_rng`` takes."""
        if (key is None) != (self.keyed is None):
            raise ValueError(f"random stream {self.name!r}: " + ("needs a key" if key is None else "takes no key"))
        if self.keyed == "sha1":
            return int(hashlib.sha1(key.encode()).hexdigest()[:12], 16)
        if (seed is None) != (self.fixed is not None):
            raise ValueError(f"random stream {self.name!r}: " + ("has a fixed seed" if seed is not None else
                                                                 "needs its params seed"))
        base = self.fixed if self.fixed is not None else seed + self.offset
        extra = ((zlib.crc32(key.encode()),) if self.keyed == "crc32" else ()) + self.words
        return [base, *extra] if extra else base

    def numpy(self, seed: int | None = None, key: str | None = None) -> np.random.Generator:
        return np.random.default_rng(self.entropy(seed, key))

    def int_seed(self, seed: int | None = None, key: str | None = None) -> int:
        """An integer seed (``torch.manual_seed``, ``torch.Generator().manual_seed``, a ``seed`` argument)."""
        e = self.entropy(seed, key)
        if not isinstance(e, int):
            raise ValueError(f"random stream {self.name!r}: seed material {e} is not one integer")
        return e


STREAMS: Registry[Stream] = Registry("random stream")


def stream(name: str) -> Stream:
    """The stream registered as ``name`` (a miss lists the known names)."""
    return STREAMS.get(name)


def _add(*streams: Stream) -> None:
    for s in streams:
        STREAMS.register(s.name)(s)


_add(
    # preprocess (stages/datasets)
    Stream("datasets.enron_users.rows", "each user's held-out/attacker rows (preprocess.datasets.enron_users.seed)"),
    Stream("datasets.enron_users.users", "held-in/held-out users: split_groups' shuffle, the same seed as .rows"),
    Stream("datasets.text.user_rows", "a user-level text dataset's held-out/attacker rows per user "
           "(preprocess.datasets.<name>.seed)", words=(1,)),
    Stream("datasets.text.users", "a user-level text dataset's held-in/held-out users (its seed)", offset=2),
    Stream("datasets.text.max_users", "a user-level text dataset's kept users (user_level.max_users; its seed)",
           words=(3,)),
    # canaries
    Stream("canaries.kind", "one kind's canaries and membership coins (canaries.seed)", keyed="crc32"),
    Stream("canaries.formatted", "one format's candidates and inserted order (canaries.formatted.seed)",
           keyed="crc32", words=(7,)),
    Stream("canaries.users", "canary users and their membership coins (canaries.users.seed)"),
    Stream("canaries.user_substring", "where a canary user's substring is inserted in a message (key: message id)",
           keyed="sha1"),
    # finetune (its modules convert to these names; the recipes are today's)
    Stream("finetune.init", "torch's global RNG: trainable weights' initialisation (finetune.seed)"),
    Stream("finetune.noise", "the DP noise generator unless dp.secure_rng (finetune.seed)", offset=1),
    Stream("finetune.eval_rows", "held-out evaluation rows (finetune.seed)", offset=1),
    Stream("finetune.sampler", "Poisson sampling of each step's batch unless dp.secure_rng (finetune.seed)"),
    Stream("finetune.schedule", "the fixed canary schedule (canary_insertion: repetitions; finetune.seed)",
           words=(17,)),
    Stream("finetune.secret_control", "the VMR/AIR control's coin per secret (finetune.secret_control.seed)"),
    Stream("finetune.export_order", "the exported candidates' order (finetune.seed)"),
    Stream("finetune.selfcheck.members", "the self-check's member coins (selfcheck.seed)", words=(1,)),
    # attack
    Stream("finetune.heldout_rows", "the never-trained text rows of the run's membership game, drawn by the fine-tune "
           "into its manifest (finetune.seed)", offset=7),
    Stream("attack.eia.aux", "the inverter's auxiliary texts (finetune.seed of the run)", offset=11),
    Stream("attack.eia.test", "the inverter's evaluation texts (finetune.seed of the run)", offset=13),
    # lm
    Stream("lm.prompt_init", "soft-prompt / prefix initialisation from vocabulary rows", fixed=1234),
    # audit
    Stream("audit.selfcheck.ideal", "the ideal engine's simulated counts in the self-check verdict", fixed=0),
    # variance
    Stream("variance.jitter", "the jitter plot's horizontal offsets", fixed=0),
)
