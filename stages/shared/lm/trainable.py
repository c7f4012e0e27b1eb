"""The trainable model of a run: base model + paradigm + new-token rows, and saving/loading it.

Paradigms: ``lora`` (peft LoRA on the target modules; ``auto``: the model type's attention projections),
``full`` (every decoder weight), ``prompt`` (peft prompt tuning) and ``prefix`` (peft prefix tuning).
``train_embeddings`` also trains the input embedding and the output head in any paradigm; a tied matrix is
untied first into two trainable copies that both start from it (opacus clips per module, and cannot clip one
weight used by two modules). New-token rows are trainable in every paradigm, and so are the input/output rows of
every vocabulary token a canary uses as its secret (``secret_rows``; ``finetune.secret_rows``), so
every canary kind trains the same parameters for its secret tokens.

``Trainable`` is the whole description: the fine-tune stage records the built model's ``spec`` (LoRA targets
resolved) in run.json, and the attack stage rebuilds the same model from it before loading the trained tensors.
"""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from ..core.errors import ConfigError
from .canary_lm import CanaryLM
from .loading import load_base
from .spec import Trainable

TRAINABLE = "trainable.safetensors"


def lora_targets(base, targets: tuple[str, ...] | str) -> tuple[str, ...]:
    """The LoRA target module names: ``targets`` as given, or for "auto" the attention projections peft maps the
    base model's ``config.model_type`` to (llama/qwen2: q_proj, v_proj; gpt2: c_attn; gpt_neox: query_key_value)."""
    if not isinstance(targets, str):
        return tuple(targets)
    if targets != "auto":
        raise ConfigError(f"finetune.lora.targets: must be 'auto' or a list of module names (got {targets!r})")
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as BY_TYPE

    kind = getattr(base.config, "model_type", None)
    if kind not in BY_TYPE:
        raise ConfigError(f"finetune.lora.targets: 'auto' has no target modules for model type {kind!r}; "
                          "list the module names")
    return tuple(BY_TYPE[kind])


def build_model(base_dir: str | Path, spec: Trainable, device, init: str | None = None):
    """(CanaryLM, tokenizer) ready to train: only the paradigm's weights + new rows require grad.
    ``init`` overrides ``spec.new_token_init`` (loading uses "zero": the trained rows replace them).
    The model's ``spec`` is ``spec`` as built: LoRA targets "auto" resolved to the module names (``lora_targets``)."""
    base, tok = load_base(base_dir, device)
    for p in base.parameters():
        p.requires_grad_(False)
    lm, soft, prefix = base, 0, 0
    if spec.paradigm == "lora":
        from peft import LoraConfig, get_peft_model

        spec = replace(spec, lora_targets=lora_targets(base, spec.lora_targets))
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
    model.spec = spec
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
    """trainable.safetensors (every trainable tensor); LoRA runs also get a peft adapter directory, whose
    adapter_config.json lists ``target_modules`` sorted (peft keeps them in a set and writes the set's order,
    which changes with Python's string hashing from one process to the next: the same run hashed differently)."""
    model.save_trainable(out_dir / TRAINABLE)
    if hasattr(model.lm, "peft_config"):
        model.lm.save_pretrained(out_dir / "adapter")
        config = Path(out_dir) / "adapter" / "adapter_config.json"
        data = json.loads(config.read_text())
        if isinstance(data.get("target_modules"), list):
            data["target_modules"] = sorted(data["target_modules"])
        config.write_text(json.dumps(data, indent=2, sort_keys=True))


def load_model(base_dir: str | Path, run_dir: str | Path, spec: Trainable, device):
    """A fine-tuned run for scoring: the model ``spec`` describes, with the run's trained tensors."""
    model, tok = build_model(base_dir, spec, device, init="zero")
    model.load_trainable(Path(run_dir) / TRAINABLE)
    model.eval()
    return model, tok
