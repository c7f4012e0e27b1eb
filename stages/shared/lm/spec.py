"""A run's trainable model as data (``Trainable``): what run.json records and the attack stage rebuilds the model
from (stages/shared/lm/trainable.py builds, saves and loads it). No model code here, so the records that hold it
can be read without loading torch."""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from ..core.errors import DataError


@dataclass(frozen=True)
class Trainable:
    paradigm: str  # lora | full | prompt | prefix
    lora_r: int
    lora_alpha: int
    lora_dropout: float
    #: module names, or "auto" (the base model type's attention projections, peft's mapping): ``build_model``
    #: resolves it, and the model's ``spec`` (what run.json records) holds the resolved names
    lora_targets: tuple[str, ...] | str
    virtual_tokens: int  # soft-prompt / prefix length (paradigms prompt / prefix)
    num_new_tokens: int  # rows of the new-token embedding and output head
    new_token_init: str  # mean | zero
    #: vocabulary ids with their own trainable input and output rows (every canary secret token)
    secret_rows: tuple[int, ...]
    #: the input embedding and output head are trained too (untied copies when the base model ties them)
    train_embeddings: bool

    def to_json(self) -> dict[str, Any]:
        targets = self.lora_targets if isinstance(self.lora_targets, str) else list(self.lora_targets)
        return {**asdict(self), "lora_targets": targets, "secret_rows": list(self.secret_rows)}

    @classmethod
    def from_json(cls, data: dict[str, Any], where: str = "trainable") -> "Trainable":
        """The record of ``data`` (run.json's ``trainable``): an unknown or missing key is refused, naming it."""
        names = [f.name for f in fields(cls)]
        unknown = sorted(set(data) - set(names))
        missing = [n for n in names if n not in data]
        if unknown or missing:
            key, what = (unknown[0], "unknown key") if unknown else (missing[0], "missing key")
            raise DataError(f"{where}: {what} {key!r} (a record of another version?)")
        targets = data["lora_targets"]
        return cls(**{**data, "lora_targets": targets if isinstance(targets, str) else tuple(targets),
                      "secret_rows": tuple(data["secret_rows"])})
