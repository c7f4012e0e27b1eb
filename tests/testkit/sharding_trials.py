"""One DP training of a tiny CanaryLM through ``loop.train``, in one process or as a torchrun rank (FSDP or DDP):
the worker of tests/finetune/test_sharding.py.

``python -m testkit.sharding_trials <specs.json> <out.pt>`` runs a list of trials. Each spec
names the tiny base, the paradigm, the clip norm, the optimizer, the steps, the noise (off: every noise draw of
standard deviation 0), the sharding and an optional checkpoint (``stop_after``: the run stops after that step, as
a killed run would). Rank 0 writes, per trial, the update of every trainable tensor (gathered where sharded), the
validation NLL of the trained model as the stage scores it and the run's privacy record.
"""
from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from types import SimpleNamespace
from unittest.mock import patch

import torch


class Stop(Exception):
    """The run is killed after its checkpoint."""


def examples(vocab: int, n: int):
    from stages.shared.lm.examples import canary_examples
    from testkit.models import canary_rows

    return canary_examples(canary_rows(vocab, n), "sft")


@contextlib.contextmanager
def noiseless(on: bool):
    """Every opacus noise draw of standard deviation 0 while ``on`` (clipping and the accountant unchanged)."""
    import opacus.optimizers.fsdpoptimizer_fast_gradient_clipping as fsdp
    import opacus.optimizers.optimizer as plain
    import opacus.optimizers.optimizer_fast_gradient_clipping as fast

    real = plain._generate_noise

    def zero(std, reference, generator=None, secure_mode=False):
        return real(0.0, reference, generator, secure_mode)

    with contextlib.ExitStack() as stack:
        if on:
            for module in (plain, fast, fsdp):
                stack.enter_context(patch.object(module, "_generate_noise", zero))
        yield


def trial(spec: dict) -> dict | None:
    """Train as ``spec`` says (this process, or this rank's share); rank 0's result, None on other ranks."""
    from stages.finetune.checkpoint import Checkpointer
    from stages.finetune.loop import TrainConfig, mean_nll, train, world
    from stages.finetune.run import unsharded
    from testkit.models import dp_params, tiny_canary_lm

    cpu = torch.device("cpu")
    torch.manual_seed(0)
    model, tok = tiny_canary_lm(Path(spec["base"]), cpu, paradigm=spec["paradigm"],
                                train_embeddings=spec.get("embeddings", False))
    before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    pool = examples(model.base_vocab, spec.get("n", 12))
    dp = dp_params(enabled=True, epsilon=8.0, delta=1e-5, grad_sample_mode=spec.get("mode", "ghost"),
                   max_grad_norm=spec["clip"], secure_rng=False)
    stop = spec.get("stop_after")
    ck = (Checkpointer(Path(spec["checkpoint"]), every=spec.get("every", 1), fingerprint="trial")
          if spec.get("checkpoint") else None)

    def on_step(rec):
        if rec["step"] == stop:
            raise Stop

    config = TrainConfig(steps=spec["steps"], batch_size=len(pool), physical_batch_size=spec.get("chunk", 3),
                         lr=spec.get("lr", 1.0), weight_decay=0.0, clip_norm=spec["clip"], seed=spec.get("seed", 0),
                         pad_id=tok.pad_token_id, dp=dp, sample_rate=spec.get("q", 1.0),
                         optimizer=spec.get("optimizer", "sgd"), population=len(pool), progress=False,
                         checkpoint=ck, on_step=on_step if stop else None, sharding=spec.get("sharding", "ddp"))
    with noiseless(not spec.get("noise", False)):
        try:
            result = train(model, pool, config)
        except Stop:
            return {"stopped": True} if world()[0] == 0 else None
    if world()[0] != 0:
        return None
    if result.gathered is not None:
        model = unsharded(SimpleNamespace(base_model=Path(spec["base"])), model.spec, result.gathered, cpu)
    after = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    nll = mean_nll(model, examples(model.base_vocab, 30)[-8:], tok.pad_token_id)["nll"]
    return {"update": {n: after[n] - before[n] for n in before}, "nll": nll, "privacy": result.privacy.to_json(),
            "resumed_from": result.resumed_from, "stopped": False}


def main(argv) -> None:
    from stages.finetune.distributed import finish, init
    from stages.shared.core.cli import configure_process

    configure_process()
    torch.set_num_threads(1)
    specs = json.loads(Path(argv[0]).read_text())
    init("cpu")
    try:
        out = [trial(spec) for spec in specs]
    finally:
        finish()
    if out[0] is not None:
        torch.save(out, argv[1])


if __name__ == "__main__":
    main(sys.argv[1:])
