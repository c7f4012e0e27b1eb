"""Build the trainable model for a run (base + LoRA + new-token rows) and save/load it."""
from __future__ import annotations

import json
from pathlib import Path

from ..errors import ConfigError, DataError
from ..models.canary_lm import CanaryLM
from ..models.loading import load_base

NEW_ROWS = "new_rows.safetensors"


def build_model(base_dir: str | Path, params, num_new: int, init: str, device):
    """(CanaryLM, tokenizer) ready to train: LoRA adapters + the new-token rows are trainable."""
    base, tok = load_base(base_dir, device)
    for p in base.parameters():
        p.requires_grad_(False)
    if params.paradigm == "lora":
        from peft import LoraConfig, get_peft_model

        cfg = LoraConfig(r=params.lora.r, lora_alpha=params.lora.alpha, lora_dropout=params.lora.dropout,
                         target_modules=list(params.lora.targets), bias="none")
        try:
            lm = get_peft_model(base, cfg)
        except ValueError as exc:
            raise ConfigError(f"finetune.lora.targets: {str(exc).splitlines()[0]}") from None
    else:  # pragma: no cover - guarded by the params Literal
        raise ConfigError(f"finetune.paradigm: unknown paradigm {params.paradigm!r}")
    model = CanaryLM(lm, num_new=num_new, init=init).to(device)
    return model, tok


def save_model(model: CanaryLM, out_dir: Path) -> None:
    model.lm.save_pretrained(out_dir / "adapter")
    model.save_new_rows(out_dir / NEW_ROWS)


def load_model(base_dir: str | Path, run_dir: str | Path, device):
    """Load a fine-tuned run (base + adapter + new rows) for scoring; returns (CanaryLM, tokenizer)."""
    from peft import PeftModel

    run_dir = Path(run_dir)
    info_path = run_dir / "run.json"
    if not info_path.is_file():
        raise DataError(f"{run_dir}: no fine-tuned run here (run.json missing; run the finetune stage)")
    info = json.loads(info_path.read_text())
    base, tok = load_base(base_dir, device)
    lm = PeftModel.from_pretrained(base, run_dir / "adapter") if (run_dir / "adapter").is_dir() else base
    model = CanaryLM(lm, num_new=info["num_new_tokens"], init="zero").to(device)
    if info["num_new_tokens"]:
        model.load_new_rows(run_dir / NEW_ROWS)
    model.eval()
    return model, tok
