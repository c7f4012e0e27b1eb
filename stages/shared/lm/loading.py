"""Load the saved base model (data/models/base) and pick the device every stage computes on."""
from __future__ import annotations

from pathlib import Path

from ..core.errors import ConfigError
from ..core.io import missing


def pick_device(pref: str = "auto"):
    import torch

    if pref == "cuda" or (pref == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise ConfigError("device: cuda requested but no CUDA device is available")
        return torch.device("cuda")
    return torch.device("cpu")


def load_base(model_dir: str | Path, device=None):
    """Load the saved base model (float32 on CPU; the saved dtype on GPU) and its tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM

    tok = load_tokenizer(model_dir)
    device = device or torch.device("cpu")
    dtype = torch.float32 if device.type == "cpu" else "auto"
    model = AutoModelForCausalLM.from_pretrained(Path(model_dir), dtype=dtype).to(device)
    model.eval()
    return model, tok


def load_tokenizer(model_dir: str | Path, base: bool = True):
    """The base model's tokenizer (pad = eos when it has no pad token); ``base`` False: any tokenizer directory
    (a PEFT adapter's has no config.json)."""
    from transformers import AutoTokenizer

    model_dir = Path(model_dir)
    if base and not (model_dir / "config.json").is_file():
        raise missing(model_dir / "config.json", "base_model")
    tok = AutoTokenizer.from_pretrained(model_dir)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok
