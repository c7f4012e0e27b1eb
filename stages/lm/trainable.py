"""The trainable model of a run: base model + paradigm + new-token rows, and saving/loading it.

Paradigms: ``lora`` (peft LoRA on the target modules), ``full`` (every decoder weight), ``prompt``
(peft prompt tuning) and ``prefix`` (peft prefix tuning). ``train_embeddings`` also trains the input
embedding and the output head in any paradigm; a tied matrix is untied first into two trainable copies
that both start from it (opacus clips per module, and cannot clip one weight used by two modules). New-token rows are trainable in every paradigm, and so are the input/output rows of
every vocabulary token a canary uses as its secret (``secret_rows``; ``finetune.secret_rows``), so
every canary kind trains the same parameters for its secret tokens.

``Trainable`` is the whole description: the fine-tune stage records it in run.json, and the attack
stage rebuilds the same model from it before loading the trained tensors.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..core.errors import ConfigError
from .canary_lm import CanaryLM
from .loading import load_base

TRAINABLE = "trainable.safetensors"


@dataclass(frozen=True)
class Trainable:
    paradigm: str  # lora | full | prompt | prefix
    lora_r: int
    lora_alpha: int
    lora_dropout: float
    lora_targets: tuple[str, ...]
    virtual_tokens: int  # soft-prompt / prefix length (paradigms prompt / prefix)
    num_new_tokens: int  # rows of the new-token embedding and output head
    new_token_init: str  # mean | zero
    #: vocabulary ids with their own trainable input and output rows (every canary secret token)
    secret_rows: tuple[int, ...]
    #: the input embedding and output head are trained too (untied copies when the base model ties them)
    train_embeddings: bool

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "lora_targets": list(self.lora_targets), "secret_rows": list(self.secret_rows)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Trainable":
        return cls(**{**data, "lora_targets": tuple(data["lora_targets"]), "secret_rows": tuple(data["secret_rows"])})


def build_model(base_dir: str | Path, spec: Trainable, device, init: str | None = None):
    """(CanaryLM, tokenizer) ready to train: only the paradigm's weights + new rows require grad.
    ``init`` overrides ``spec.new_token_init`` (loading uses "zero": the trained rows replace them)."""
    base, tok = load_base(base_dir, device)
    for p in base.parameters():
        p.requires_grad_(False)
    lm, soft, prefix = base, 0, 0
    if spec.paradigm == "lora":
        from peft import LoraConfig, get_peft_model

        cfg = LoraConfig(r=spec.lora_r, lora_alpha=spec.lora_alpha, lora_dropout=spec.lora_dropout,
                         target_modules=list(spec.lora_targets), bias="none")
        try:
            lm = get_peft_model(base, cfg)
        except ValueError as exc:
            raise ConfigError(f"finetune.lora.targets: {str(exc).splitlines()[0]}") from None
    elif spec.paradigm == "full":
        frozen = {id(base.get_input_embeddings().weight), id(base.get_output_embeddings().weight)}
        for p in base.parameters():
            if id(p) not in frozen:
                p.requires_grad_(True)
    elif spec.paradigm == "prompt":
        soft = spec.virtual_tokens
    elif spec.paradigm == "prefix":
        prefix = spec.virtual_tokens
    else:
        raise ConfigError(f"finetune.paradigm: unknown paradigm {spec.paradigm!r}")
    if spec.train_embeddings:
        untie_embeddings(base)
    model = CanaryLM(lm, num_new=spec.num_new_tokens, init=init or spec.new_token_init, soft_prompt=soft,
                     prefix=prefix, secret_rows=spec.secret_rows).to(device)
    return model, tok


def untie_embeddings(base) -> None:
    """Make the input embedding and output head two trainable parameters; a tied matrix becomes two
    copies that start equal (the config stops tying them, so nothing re-ties them later)."""
    from torch import nn

    emb, head = base.get_input_embeddings(), base.get_output_embeddings()
    if head.weight is emb.weight:
        head.weight = nn.Parameter(emb.weight.detach().clone())
        base.config.tie_word_embeddings = False
    emb.weight.requires_grad_(True)
    head.weight.requires_grad_(True)


def save_model(model: CanaryLM, out_dir: Path) -> None:
    """trainable.safetensors (every trainable tensor); LoRA runs also get a peft adapter directory."""
    model.save_trainable(out_dir / TRAINABLE)
    if hasattr(model.lm, "peft_config"):
        model.lm.save_pretrained(out_dir / "adapter")


def load_model(base_dir: str | Path, run_dir: str | Path, spec: Trainable, device):
    """A fine-tuned run for scoring: the model ``spec`` describes, with the run's trained tensors."""
    model, tok = build_model(base_dir, spec, device, init="zero")
    model.load_trainable(Path(run_dir) / TRAINABLE)
    model.eval()
    return model, tok
