"""The named random streams of the pipeline: which generator each random choice draws from, declared in one place.

One derivation (``DERIVATION``) for every stream: the stream's seed material is a ``numpy.random.SeedSequence``
whose entropy is the params seed (``<section>.seed``; a constant where no params seed exists, ``fixed``; the key's
SHA-1 where the key alone seeds it, ``keyed="sha1"``) and whose spawn key is the stream's name (its CRC-32) followed
by the key's CRC-32 (``keyed="crc32"``: one stream per key, adding a key leaves the others unchanged). Two things make
the streams of different (seed, name, key) triples distinct: their SeedSequence inputs (entropy, spawn key) differ,
which ``tests/shared/core/test_seeds.py`` checks exactly (every registered name and key has its own CRC-32), and
SeedSequence hashes those inputs into its state, which is numpy's design, not something a test can prove (the test
that no two first draws at seeds s..s+100 are equal is a necessary check only). So seed s's DP noise is not seed
s+1's initialisation, as it was under the ``seed + offset`` recipes before. Use
``stream(name).numpy(seed, key=...)`` for a numpy Generator and ``stream(name).int_seed(seed)`` for
``torch.manual_seed`` / ``torch.Generator().manual_seed`` or a function's ``seed`` argument (63 bits of the same
SeedSequence).
"""
from __future__ import annotations

import hashlib
import zlib
from dataclasses import dataclass
from typing import Literal

import numpy as np

from .registry import Registry

#: the derivation every stream uses; recorded with each pooled-audit row (reports/audit_study/pooled.json), whose
#: rows before it used ``seed + offset`` recipes under which a run's noise stream was the next seed's initialisation
DERIVATION = "seedsequence-v1"


def _word(text: str) -> int:
    return zlib.crc32(text.encode())


@dataclass(frozen=True)
class Stream:
    name: str
    #: what the stream draws, and the params key of its seed
    what: str
    #: "crc32": the key's CRC-32 follows the name in the spawn key (one independent stream per key) | "sha1": the
    #: entropy is ``int(sha1(key)[:12], 16)``, no params seed
    keyed: Literal["crc32", "sha1"] | None = None
    #: a constant seed (the stream has no params seed)
    fixed: int | None = None

    def sequence(self, seed: int | None = None, key: str | None = None) -> np.random.SeedSequence:
        """The stream's seed material: ``SeedSequence(entropy, spawn_key=(crc32(name)[, crc32(key)]))``."""
        if (key is None) != (self.keyed is None):
            raise ValueError(f"random stream {self.name!r}: " + ("needs a key" if key is None else "takes no key"))
        if self.keyed == "sha1":
            if seed is not None:
                raise ValueError(f"random stream {self.name!r}: is seeded by its key alone")
            entropy = int(hashlib.sha1(key.encode()).hexdigest()[:12], 16)
        else:
            if (seed is None) != (self.fixed is not None):
                raise ValueError(f"random stream {self.name!r}: " + ("has a fixed seed" if seed is not None else
                                                                     "needs its params seed"))
            entropy = self.fixed if self.fixed is not None else int(seed)
        if entropy < 0:
            raise ValueError(f"random stream {self.name!r}: seed {entropy} is negative")
        spawn = (_word(self.name),) + ((_word(key),) if self.keyed == "crc32" else ())
        return np.random.SeedSequence(entropy, spawn_key=spawn)

    def numpy(self, seed: int | None = None, key: str | None = None) -> np.random.Generator:
        return np.random.default_rng(self.sequence(seed, key))

    def int_seed(self, seed: int | None = None, key: str | None = None) -> int:
        """A 63-bit integer seed from the same SeedSequence (``torch.manual_seed``, ``torch.Generator().manual_seed``,
        a function's ``seed`` argument)."""
        return int(self.sequence(seed, key).generate_state(1, np.uint64)[0] >> np.uint64(1))


STREAMS: Registry[Stream] = Registry("random stream")


def stream(name: str) -> Stream:
    """The stream registered as ``name`` (a miss lists the known names)."""
    return STREAMS.get(name)


def _add(*streams: Stream) -> None:
    for s in streams:
        STREAMS.register(s.name)(s)


_add(
    # preprocess (stages/shared/datasets)
    Stream("datasets.enron_users.rows", "each user's held-out/attacker rows (preprocess.datasets.enron_users.seed)"),
    Stream("datasets.enron_users.users", "held-in/held-out users: split_groups' shuffle (its seed)"),
    Stream("datasets.split", "a dataset's train/valid/test groups (TOFU: its test authors): split_groups' shuffle "
           "(preprocess.datasets.<name>.seed)"),
    Stream("datasets.text.user_rows", "a user-level text dataset's held-out/attacker rows per user "
           "(preprocess.datasets.<name>.seed)"),
    Stream("datasets.text.users", "a user-level text dataset's held-in/held-out users (its seed)"),
    Stream("datasets.text.max_users", "a user-level text dataset's kept users (user_level.max_users; its seed)"),
    # canaries
    Stream("canaries.kind", "one kind's canaries and membership coins (canaries.seed)", keyed="crc32"),
    Stream("canaries.formatted", "one format's candidates and inserted order (canaries.formatted.seed)",
           keyed="crc32"),
    Stream("canaries.users", "canary users and their membership coins (canaries.users.seed)"),
    Stream("canaries.audit_users", "the user-level audit's canary users: their coins, then their rows' prefixes "
           "(canaries.audit_users.seed)"),
    Stream("canaries.user_substring", "where a canary user's substring is inserted in a message (key: message id)",
           keyed="sha1"),
    # finetune
    Stream("finetune.init", "torch's global RNG: trainable weights' initialisation (finetune.seed)"),
    Stream("finetune.noise", "the DP noise generator unless dp.secure_rng (finetune.seed)"),
    Stream("finetune.eval_rows", "held-out evaluation rows (finetune.seed)"),
    Stream("finetune.text_rows", "the run's sample of its dataset's training rows (finetune.seed)"),
    Stream("finetune.diagnostics", "the canaries whose initial gradients the DP run's diagnostics measure "
           "(finetune.seed)"),
    Stream("finetune.sampler", "Poisson sampling of each step's batch unless dp.secure_rng (finetune.seed)"),
    Stream("finetune.schedule", "the fixed canary schedule (canary_insertion: repetitions; finetune.seed)"),
    Stream("finetune.user_rows", "user-level DP: which rows of a sampled user with more than dp.rows_per_user a step "
           "trains on, unless dp.secure_rng (finetune.seed)"),
    Stream("finetune.secret_control", "the VMR/AIR control's coin per secret (finetune.secret_control.seed)"),
    Stream("finetune.export_order", "the exported candidates' order (finetune.seed)"),
    Stream("finetune.selfcheck.members", "the self-check's member coins (selfcheck.seed)"),
    # attack
    Stream("finetune.heldout_rows", "the never-trained text rows of the run's membership game, drawn by the fine-tune "
           "into its manifest (finetune.seed)"),
    Stream("attack.eia.aux", "the inverter's auxiliary texts (finetune.seed of the run)"),
    Stream("attack.eia.test", "the inverter's evaluation texts (finetune.seed of the run)"),
    # lm
    Stream("lm.prompt_init", "soft-prompt / prefix initialisation from vocabulary rows", fixed=1234),
    # audit
    Stream("audit.ideal_pooled", "the pooled ideal audit's simulated counts of the run at position key "
           "(audit.ceiling.seed)", keyed="crc32"),
    Stream("audit.selfcheck.ideal", "the ideal engine's simulated counts in the self-check verdict", fixed=0),
    # variance
    Stream("variance.silent.power", "the second study's power simulation (variance.silent.seed)"),
    Stream("variance.silent.ideal", "the second study's ideal per-model counts for its power (variance.silent.seed)"),
    Stream("variance.jitter", "the jitter plot's horizontal offsets", fixed=0),
    # studies
    Stream("studies.user_level_ideal", "the user-level plan's ideal audit of one (unit, rows per user) at key "
           "(user_level.seed)", keyed="crc32"),
)
