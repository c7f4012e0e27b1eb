"""Training, privacy accounting and utility of each run (an external run's figures marked as its trainer's claim)."""
from __future__ import annotations

from ...finetune.schema import PrivacyRecord
from ...shared.core.formatting import Table, fmt
from ..inputs import Inputs
from ..render import Section


def _clipping(pv: PrivacyRecord) -> str:
    """A DP run's grad-sample mode (finetune.dp.grad_sample_mode), with auto's reason where it did not pick bk."""
    if not pv.dp or not pv.grad_sample_mode:
        return "—"
    why = pv.grad_sample_mode_reason
    mode = f"{pv.grad_sample_mode} (auto: {why})" if why else pv.grad_sample_mode
    if (pv.world_size or 1) > 1:  # data-parallel: each process a replica (ddp) or a shard (fsdp)
        mode += f"; {pv.sharding or 'ddp'} over {pv.world_size} processes"
    return mode


def training_section(inp: Inputs) -> Section:
    tr = Table(["run", "dataset", "DP", "σ", "C", "q", "steps T", "expected exposures q·T", "candidate pool",
                "valid perplexity", "noise and sampler RNG", "clipping"])
    external = []
    for run, r in inp.runs.items():
        pv, t = r.privacy, r.training
        if pv.external:
            external.append(_external_note(run, pv))
        tr.rows.append([f"{run} (trained elsewhere)" if pv.external else run, r.dataset, pv.dp,
                        pv.noise_multiplier, pv.max_grad_norm,
                        t.sample_rate, t.steps, t.expected_exposures_per_member, t.n_population,
                        r.utility.valid_perplexity,
                        pv.rng_label if pv.dp else "—", _clipping(pv)])
    return Section("Training, privacy accounting and utility", tables=[tr], paragraphs=[
        "Poisson sampling at rate q per step; DP runs use opacus DP-SGD (per-example clipping at C, Gaussian "
        "noise σ·C, σ calibrated so the accountant spends the target ε at δ; clipping: how the per-example norms "
        "were computed, `finetune.dp.grad_sample_mode`, with auto's reason where it did not pick bk, and for a run "
        "over several processes whether each held a replica (ddp) or a shard (fsdp) of the model). Validation "
        "perplexity is on "
        "held-out rows of each run's dataset, on the tokens it trains on (the reply under SFT). A seeded RNG makes a "
        "run reproducible, and its guarantee then assumes the seed is secret; `finetune.dp.secure_rng: true` draws "
        "the sampler and the noise from OS entropy with opacus' secure_mode (for real deployments). A DP run's "
        "published step log holds step indices only: batch sizes, token counts, losses and step times are "
        "functions of the data the accountant does not cover."] + external)


def _external_note(run: str, pv: PrivacyRecord) -> str:
    """What an external run's row means: imported, not trained here; its privacy figures are a claim."""
    text = (f"**Run {run} was trained outside the pipeline** (`finetune.external`: the model was imported and "
            "attacked and audited unchanged; its members are the exported canaries, its sealed membership file's "
            "sha-256 is in run.json). Its training columns are unknown here. ")
    if not pv.dp:
        return text + "No DP guarantee was claimed for it."
    ours = pv.accountant_epsilon_of_claim
    text += (f"Its ε = {fmt(pv.epsilon_spent)} at δ = {pv.delta:.2g}, σ, and q, T are **the trainer's "
             f"claim, not measured**; our accountant (PRV) gives ε = {fmt(ours)} for the claimed σ, q, T.")
    if ours > pv.epsilon_spent * 1.01:
        text += " **The claim is inconsistent: its own σ, q, T spend more than the ε it states.**"
    return text
