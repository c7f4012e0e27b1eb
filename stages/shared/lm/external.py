"""A model trained outside the pipeline (``finetune.external``), loaded with the interface the attacks score:
a Hugging Face model directory, or a PEFT adapter directory over the base model. Either was trained with the
exported tokenizer, so the canaries' new tokens are ordinary rows of its (resized) vocabulary and the wrapper
needs no rows of its own."""
from __future__ import annotations

from pathlib import Path

from ..core.errors import DataError
from .canary_lm import CanaryLM

ADAPTER_CONFIG = "adapter_config.json"


def model_kind(model_dir: Path) -> str:
    """``peft`` (an adapter over the base model) or ``hf`` (a whole model); a one-line error otherwise."""
    model_dir = Path(model_dir)
    if (model_dir / ADAPTER_CONFIG).is_file():
        return "peft"
    if (model_dir / "config.json").is_file():
        return "hf"
    raise DataError(f"{model_dir}: neither a Hugging Face model directory (config.json) nor a PEFT adapter "
                    f"({ADAPTER_CONFIG})")


def load_external(model_dir: Path, base_dir: Path, device, tokenizer_dir: Path | None = None):
    """(CanaryLM over the external model, its tokenizer); float32 on CPU, fp32 scoring everywhere."""
    import torch
    from transformers import AutoModelForCausalLM

    from .loading import load_tokenizer

    model_dir = Path(model_dir)
    kind = model_kind(model_dir)
    tok_dir = model_dir if (model_dir / "tokenizer_config.json").is_file() else tokenizer_dir
    if tok_dir is None:
        raise DataError(f"{model_dir}: no tokenizer (save the exported tokenizer with the model)")
    tok = load_tokenizer(tok_dir, base=False)
    if kind == "hf":
        lm = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    else:
        from peft import PeftModel

        base = AutoModelForCausalLM.from_pretrained(Path(base_dir), dtype=torch.float32)
        if base.get_input_embeddings().num_embeddings != len(tok):
            base.resize_token_embeddings(len(tok), mean_resizing=False)  # the adapter saved the resized rows
        lm = PeftModel.from_pretrained(base, model_dir, is_trainable=False)
    lm.to(device).eval()
    return CanaryLM(lm).eval(), tok
