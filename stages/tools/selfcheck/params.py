"""Params of ``leakaudit selfcheck`` (the ``selfcheck`` section): the DP engine self-check's design and its
configurations. Not a DVC stage's params: the self-check (``stages/tools/selfcheck/``) is a tool run beside the
pipeline,
and its table (reports/selfcheck.json) is the report stage's input."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from ...shared.core.params import Accountant, build, check


@dataclass(frozen=True)
class SelfcheckConfig:
    """One configuration of the DP engine self-check: the clipping mode, the probe model and the regime."""

    #: ghost_fsdp: opacus' ghost clipping over an FSDP2-sharded probe (needs 2 processes)
    mode: Literal["hooks", "ghost", "bk", "ghost_fsdp"]
    #: users: user-level DP (finetune.dp.unit: user) on the linear probe's rows, each canary a user of several rows
    #: (``SelfcheckParams.rows_per_user`` + 1), a user's whole contribution clipped as one unit
    paradigm: Literal["rows", "lora", "full", "train_embeddings", "users"]
    processes: int
    #: the probe model (stages/tools/selfcheck/probe.py): linear (each paradigm) or transformer (rows behind a decoder)
    probe: Literal["linear", "transformer"]
    #: q and T; q = 1, T = 1 is the Gaussian mechanism, q < 1 the accountant's Poisson-subsampled composition
    sample_rate: float
    steps: int
    optimizer: Literal["sgd", "adam", "adamw"]
    #: stopped after half the steps (its checkpoint written) and resumed from the checkpoint in a new model
    resume: bool

    def problems(self):
        return (
            check(self.processes in (1, 2), "processes", "must be 1 or 2", self.processes)
            + check(0 < self.sample_rate <= 1, "sample_rate", "must be in (0, 1]", self.sample_rate)
            + check(self.steps >= 1, "steps", "must be >= 1", self.steps)
            + check(self.probe == "linear" or self.paradigm == "rows", "paradigm",
                    "the transformer probe trains its own rows only: use 'rows'", self.paradigm)
            + check(self.paradigm != "lora" or self.steps == 1, "steps",
                    "the lora probe is linear in its own rows at the first step only: use steps 1", self.steps)
            + check(not self.resume or (self.steps >= 2 and self.processes == 1), "resume",
                    "a resumed configuration needs steps >= 2 and 1 process", self.resume)
            + check(self.mode != "ghost_fsdp" or self.processes == 2, "processes",
                    "ghost_fsdp shards the probe across processes: use 2", self.processes)
            + check(self.paradigm != "users" or (self.mode == "hooks" and self.processes == 1
                                                 and self.probe == "linear"), "paradigm",
                    "users (user-level DP) runs the linear probe in hooks mode in 1 process", self.paradigm)
        )


@dataclass(frozen=True)
class SelfcheckParams:
    """``leakaudit selfcheck`` (stages/tools/selfcheck/trials.py): gradient canaries through the fine-tune's DP path.
    The design (epsilon, m, guesses, the tests' family) is fixed here before any run; each configuration names its
    regime (q, T, optimizer, probe, resume)."""

    out: str
    #: the mutants' flag rates over fresh seeds (benchmarks/selfcheck_mutants.py writes it; the report shows it)
    mutants: str
    #: m gradient canaries of the linear probe, each a member by a fair seeded coin
    canaries: int
    #: m of the transformer probe (a forward pass through a decoder layer per canary and step)
    transformer_canaries: int
    #: the one-run f-DP test beside the specification tests: the k highest scores guessed "in", the k lowest "out"
    guesses_in: int
    guesses_out: int
    epsilon: float
    delta: float
    max_grad_norm: float
    accountant: Accountant
    #: each canary's per-example gradient norm is about this x its direction's norm (>> max_grad_norm: clipped)
    gradient_scale: float
    #: width of the linear probe's embedding rows / Linear inputs
    width: int
    lr: float
    physical_batch_size: int
    #: the user-level configurations (paradigm users): the most rows of a sampled user a step trains on
    #: (finetune.dp.rows_per_user); each canary user holds one more
    rows_per_user: int
    #: every test of every configuration is judged at alpha / (configurations x tests per configuration)
    alpha: float
    seed: int
    configs: tuple[SelfcheckConfig, ...]

    def problems(self):
        return (
            check(self.canaries >= 2, "canaries", "must be >= 2", self.canaries)
            + check(self.transformer_canaries >= 2, "transformer_canaries", "must be >= 2", self.transformer_canaries)
            + check(self.guesses_in >= 0 and self.guesses_out >= 0 and 0 < self.guesses_in + self.guesses_out
                    <= min(self.canaries, self.transformer_canaries), "guesses_in",
                    "guesses_in + guesses_out must be in [1, canaries]", (self.guesses_in, self.guesses_out))
            + check(self.epsilon > 0, "epsilon", "must be > 0", self.epsilon)
            + check(0 < self.delta < 1, "delta", "must be in (0, 1)", self.delta)
            + check(self.max_grad_norm > 0, "max_grad_norm", "must be > 0", self.max_grad_norm)
            + check(self.gradient_scale > 0, "gradient_scale", "must be > 0", self.gradient_scale)
            + check(self.width >= 1, "width", "must be >= 1", self.width)
            + check(self.lr > 0, "lr", "must be > 0", self.lr)
            + check(self.physical_batch_size > 0, "physical_batch_size", "must be > 0", self.physical_batch_size)
            + check(1 <= self.rows_per_user <= self.physical_batch_size, "rows_per_user",
                    "must be in [1, physical_batch_size]", self.rows_per_user)
            + check(0 < self.alpha < 1, "alpha", "must be in (0, 1)", self.alpha)
            + check(len(self.configs) > 0, "configs", "must list at least one configuration", self.configs)
        )

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "SelfcheckParams":
        return build(cls, data, "selfcheck")
