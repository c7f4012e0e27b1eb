"""Which text a run trains on, and the never-trained text its membership game compares it with.

Only the fine-tune draws these; it writes what it drew into the run's manifest (``schema.MANIFEST``), and the
attack, audit and report read the manifest instead of drawing again.

* the run's training pairs: a seeded sample (``finetune.seed``) of its dataset's training split, after the
  randomised secret control (``secret_control``) dropped the rows of held-out secrets;
* the held-out comparison pairs: as many never-trained pairs, drawn from the ``heldout`` random stream (the test
  split; for user-level data, the test rows of held-in users only: ``held_in_unseen_rows``);
* which real secrets the run trained on (``secret_arms``).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..shared.core.errors import ConfigError
from ..shared.core.seeds import stream
from ..shared.datasets import DatasetSpec, read_split, sample
from ..shared.datasets.users import apply_canary_users, canary_user_split
from ..shared.lm.examples import Example, text_examples
from .schema import TextSetup

Pair = tuple[str, str]


def secret_control(rows: list[dict], secrets: list[dict], spec, n: int, seed: int) -> tuple[list[dict], dict]:
    """The randomised trained/untrained control of VMR/AIR: the first ``n`` secrets (the secrets file's order)
    that occur in the run's sampled training rows each get a seeded coin; every row containing a secret whose
    coin says "held out" is dropped, so which secrets are trained on is decided by the coin, not by frequency,
    and a trained-minus-held-out difference is attributable to training (intention to treat: a trained secret
    that shared its only row with a held-out one stays in the trained arm)."""
    present = spec.trained_secrets(rows, secrets)
    cands = [s_ for s_, p in zip(secrets, present) if p][:n]
    coins = stream("finetune.secret_control").numpy(seed).random(len(cands)) < 0.5
    held_out = [s_ for s_, c in zip(cands, coins) if not c]
    kept = [r for r in rows if not any(spec.trained_secrets([r], held_out))] if held_out else rows
    still = spec.trained_secrets(kept, [s_ for s_, c in zip(cands, coins) if c])
    return kept, {"seed": seed, "candidates": len(cands), "rows_dropped": len(rows) - len(kept),
                  "trained": [s_["secret_id"] for s_, c in zip(cands, coins) if c],
                  "held_out": [s_["secret_id"] for s_ in held_out], "trained_still_present": int(sum(still))}


@dataclass(frozen=True)
class RunText:
    """A run's text: its dataset's spec (resolved by the caller from the params it read), the processed data, what
    decides the run's draws (``setup``) and its canary users. Owns the run's training, held-out, evaluation and
    secret rows."""

    processed: Path
    spec: DatasetSpec
    setup: TextSetup
    canary_users: dict[str, dict]

    def rows(self, split: str) -> list[dict]:
        """The rows of ``split``; canary users moved to the split of their drawn held-in/held-out set."""
        return canary_user_split(lambda s: read_split(self.processed, self.spec, s), split, self.canary_users)

    def pairs(self, split: str, n: int, seed: int) -> list[Pair]:
        """A seeded sample of n (prompt, target) pairs of a split (each canary user's documents in the split of its
        drawn set, its substring inserted)."""
        rows = apply_canary_users(self.rows(split), self.canary_users, self.spec.user_columns)
        return sample(self.spec.pairs(rows), n, seed)

    def examples(self, split: str, tok, n: int, seed: int) -> list[Example]:
        """``pairs`` of a split, tokenized as the run trains on them."""
        return text_examples(self.pairs(split, n, seed), tok, self.setup.max_length, self.setup.objective)

    def trained_rows(self) -> list[dict]:
        """The training rows the run's text pairs came from (before canary-user insertion). Exact for datasets
        with one pair per row (those with secrets: Enron, TOFU), where it is the same seeded draw."""
        return sample(self.rows("train"), self.setup.max_text_rows,
                      stream("finetune.text_rows").int_seed(self.setup.seed))

    def training_pairs(self, secrets: list[dict] | None) -> tuple[list[Pair], dict | None]:
        """The run's training pairs and its randomised secret control (None when the dataset has no secrets or
        ``setup.control_secrets`` is 0)."""
        spec, setup = self.spec, self.setup
        if not (spec.secrets and setup.control_secrets and secrets is not None):
            return self.pairs("train", setup.max_text_rows, stream("finetune.text_rows").int_seed(setup.seed)), None
        rows, control = secret_control(self.trained_rows(), secrets, spec, setup.control_secrets,
                                       setup.control_seed)
        return spec.pairs(apply_canary_users(rows, self.canary_users, spec.user_columns)), control

    def training_users(self, secrets: list[dict] | None) -> list:
        """The user of each of ``training_pairs``' pairs, in the same order (user-level DP): the same seeded draw
        over the same rows, read for their ``user``. Refused (ConfigError naming ``finetune.dp.unit``) where a row
        names no user or gives other than one pair."""
        spec, setup = self.spec, self.setup
        if not (spec.secrets and setup.control_secrets and secrets is not None):
            rows = apply_canary_users(self.rows("train"), self.canary_users, spec.user_columns)
            users = sample([r.get("user") for r in rows], setup.max_text_rows,
                           stream("finetune.text_rows").int_seed(setup.seed))
        else:
            rows, _ = secret_control(self.trained_rows(), secrets, spec, setup.control_secrets, setup.control_seed)
            users = [r.get("user") for r in rows]
        if len(spec.pairs(rows)) != len(rows) or any(u is None for u in users):
            raise ConfigError(f"finetune.dp.unit: user needs one pair per row, each row naming its user; dataset "
                              f"{spec.name} has none (user-level: enron_users, a text dataset with user_field or "
                              f"rows_per_user)")
        return users

    def held_in_unseen_rows(self) -> list[dict]:
        """Non-members of a user-level text pool: never-trained rows (the test split) of held-in users only, the
        same users the members' trained rows come from (canary users by their drawn set). A row's split within a
        user is a seeded draw, so the two sides differ only by training. Rows of held-out users differ by who wrote
        them (on the Enron users run their blind baseline reached AUROC 0.84: a user-inference pool, not a text
        one), and rows of every user mix the two."""
        rows = apply_canary_users(self.rows("test"), self.canary_users, self.spec.user_columns)
        return [r for r in rows if r["user_set"] == "held_in"]

    def heldout_pairs(self, n: int) -> list[Pair]:
        """The membership game's never-trained side: ``n`` pairs in draw order (any prefix of them is the draw of a
        smaller n)."""
        seed = stream("finetune.heldout_rows").int_seed(self.setup.seed)
        if self.spec.users:
            return sample(self.spec.pairs(self.held_in_unseen_rows()), n, seed)
        return self.pairs("test", n, seed)

    def secret_arms(self, secrets: list[dict] | None, control: dict | None) -> list[tuple[dict, bool]]:
        """(secret, trained) of every secret the memorization attacks may score: with the randomised control its
        candidates and their coins; without it every secret and whether the run's training rows contained it
        (frequency-confounded: the report says so)."""
        if not (self.spec.secrets and secrets):
            return []
        if control:
            arm = {**{i: True for i in control["trained"]}, **{i: False for i in control["held_out"]}}
            return [(s, arm[s["secret_id"]]) for s in secrets if s["secret_id"] in arm]
        return list(zip(secrets, self.spec.trained_secrets(self.trained_rows(), secrets)))
