"""What attacks score, and the log-probability cache they share.

``AttackContext.items(source)`` builds the items of a source: ``canaries`` (every kind; members
and non-members), ``text`` (the run's own training rows vs as many held-out rows of the same
dataset) or ``users`` (the attacker's samples of held-in and held-out users). ``target(items)`` and
``reference(items)`` return per-token log-probabilities of the labelled positions under the
fine-tuned model and the reference (base) model; each (model, example) is computed once, in one
length-bucketed batched pass, and kept in a table keyed by model fingerprint and example hash that
the stage writes as a DVC output (logprobs.parquet).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import ConfigError, DataError
from ..io import file_digest
from ..training.examples import Example


@dataclass
class Item:
    item_id: str
    group: str
    member: bool | None
    example: Example
    text: str  # the labelled part as text (zlib)
    user: str | None = None
    reference: np.ndarray | None = None  # reference log-probs if already known (canaries)
    repetitions: int = 0  # formatted canaries: times inserted


def example_key(e: Example) -> str:
    h = hashlib.sha1(e.ids.tobytes())
    h.update(e.labels.tobytes())
    return h.hexdigest()


class AttackContext:
    def __init__(self, run: str, ft, params, base_dir: Path, run_dir: Path, canary_dir: Path,
                 processed_dir: Path, secrets_dir: Path, device):
        self.run, self.ft, self.params = run, ft, params
        self.base_dir, self.run_dir, self.canary_dir = Path(base_dir), Path(run_dir), Path(canary_dir)
        self.processed_dir, self.secrets_dir, self.device = Path(processed_dir), Path(secrets_dir), device
        self.info = json.loads((self.run_dir / "run.json").read_text())
        self._target = None
        self._reference = None
        self._items: dict[str, list[Item]] = {}
        self._cache: dict[tuple[str, str], np.ndarray] = {}
        self.fingerprints: dict[str, str] = {}

    # ------------------------------------------------------------------ models
    @property
    def target_model(self):
        if self._target is None:
            from ..training.setup import load_model

            self._target, self.tok = load_model(self.base_dir, self.run_dir, self.device)
            self.fingerprints["target"] = file_digest(self.run_dir / "trainable.safetensors", "sha1")
        return self._target

    @property
    def tokenizer(self):
        _ = self.target_model  # loads the model and its tokenizer
        return self.tok

    @property
    def reference_model(self):
        """The model before fine-tuning: base weights, new-token rows at their initialisation."""
        if self._reference is None:
            import torch

            from ..models.canary_lm import CanaryLM
            from ..models.loading import load_base

            if not (self.base_dir / "config.json").is_file():
                raise DataError(f"{self.base_dir}: no base model for the reference-model attacks")
            base, _ = load_base(self.base_dir, self.device)
            torch.manual_seed(0)
            init = self.info.get("new_token_init", "mean")
            self._reference = CanaryLM(base, num_new=self.info["num_new_tokens"], init=init).to(self.device)
            src = json.loads((self.base_dir / "source.json").read_text())
            self.fingerprints["reference"] = hashlib.sha1(json.dumps([src, init]).encode()).hexdigest()
        return self._reference

    # ------------------------------------------------------------------ items
    def has(self, need: str) -> str | None:
        """None if the run provides ``need``, else why not (for the one-line error)."""
        if need == "canaries":
            if not self.info.get("n_member_canaries"):
                return f"run {self.run} was trained without canaries (finetune.canaries: false)"
            return None
        if need == "text":
            return None
        if need == "formatted":
            if not (self.canary_dir / "formatted.parquet").is_file():
                return f"no formatted canaries in {self.canary_dir} (canaries.formatted.enabled: false)"
            if not self.info.get("n_formatted_rows"):
                return f"run {self.run} was trained without the formatted canaries (finetune.canaries: false)"
            return None
        if need == "users":
            if self.ft.dataset != "enron_users":
                return (f"run {self.run} was fine-tuned on {self.ft.dataset}, which has no users "
                        "(user inference needs finetune.dataset: enron_users)")
            return None
        if need == "reference":
            return None if (self.base_dir / "config.json").is_file() else f"no base model at {self.base_dir}"
        if need.startswith("secrets:"):
            want = need.split(":", 1)[1]
            have = {"enron": "enron", "enron_users": "enron", "tofu": "tofu"}.get(self.ft.dataset)
            if have != want:
                return (f"run {self.run} was fine-tuned on {self.ft.dataset}, not on data with {want} secrets "
                        f"(needs finetune.dataset: {'enron or enron_users' if want == 'enron' else want})")
            f = self.secrets_dir / f"{want}.parquet"
            return None if f.is_file() else f"no secrets file {f} (run the secrets@{want} stage)"
        if "|" in need:
            reasons = [self.has(n) for n in need.split("|")]
            return None if any(r is None for r in reasons) else " and ".join(r for r in reasons if r)
        return f"unknown requirement {need!r}"

    def items(self, source: str, optional: bool = False) -> list[Item]:
        if source not in self._items:
            why = self.has(source)
            if why:
                if optional:
                    return []
                raise ConfigError(why)
            self._items[source] = getattr(self, f"_build_{source}")()
        return self._items[source]

    def _build_canaries(self) -> list[Item]:
        from ..finetune import load_canary_rows
        from ..training.examples import canary_examples

        tok = self.tokenizer
        _, canaries = load_canary_rows(self.canary_dir)
        out = []
        for kind, rows in canaries.items():
            for r, e in zip(rows, canary_examples(rows, self.ft.objective)):
                ref = np.asarray(r["base_token_logprobs"], dtype=np.float32)
                n = int((e.labels != -100).sum())
                shown = r["secret_ids"] if self.ft.objective == "sft" else r["prefix_ids"] + r["secret_ids"]
                out.append(Item(r["canary_id"], kind, r["member"], e, tok.decode(shown),
                                reference=ref[-n:] if len(ref) else None))
        return out

    @property
    def canary_users(self) -> dict[str, str]:
        from ..canary.users import load_canary_users

        return load_canary_users(self.canary_dir) if self.ft.dataset == "enron_users" else {}

    def _build_text(self) -> list[Item]:
        from ..finetune import text_examples_of

        tok = self.tokenizer
        members = text_examples_of(self.processed_dir, "train", tok, self.ft, self.ft.max_text_rows, self.ft.seed,
                                   self.canary_users)
        n = len(members) if self.params.text_items is None else min(self.params.text_items, len(members))
        members = members[:n]
        heldout = text_examples_of(self.processed_dir, "test", tok, self.ft, n, self.ft.seed + 7, self.canary_users)
        out = []
        for tag, exs, member in (("member", members, True), ("heldout", heldout, False)):
            for i, e in enumerate(exs):
                out.append(Item(f"text-{tag}-{i:05d}", "text", member, e, tok.decode(e.ids[e.labels != -100])))
        return out

    def _build_formatted(self) -> list[Item]:
        """Every candidate of every format, scored on the whole sentence (exposure ranks them)."""
        from ..data.schemas import FORMATTED
        from ..io import read_table
        from ..training.examples import make_example

        tok = self.tokenizer
        bos = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
        rows = read_table(self.canary_dir / "formatted.parquet", FORMATTED).to_pylist()
        return [Item(r["canary_id"], r["format"], r["inserted"],
                     make_example([bos], tok(r["text"], add_special_tokens=False)["input_ids"], "nwp", "formatted"),
                     r["text"], repetitions=r["repetitions"]) for r in rows]

    def _build_users(self) -> list[Item]:
        from ..data.schemas import ENRON_USERS
        from ..io import read_table
        from ..training.examples import enron_pairs, text_examples

        from ..canary.users import apply_canary_users

        cu = self.canary_users
        rows = read_table(self.processed_dir / "enron_users" / "attacker.parquet", ENRON_USERS).to_pylist()
        rows = apply_canary_users(rows, cu)
        exs = text_examples(enron_pairs(rows), self.tokenizer, self.ft.max_length, self.ft.objective)
        return [Item(r["message_id"], "canary_users" if r["user"] in cu else "users", r["user_set"] == "held_in", e,
                     r["body"], user=r["user"]) for r, e in zip(rows, exs)]

    # ------------------------------------------------------------------ log-probabilities
    def _score(self, which: str, items: list[Item]) -> list[np.ndarray]:
        from ..training.scoring import token_logprobs

        model = self.target_model if which == "target" else self.reference_model
        keys = [example_key(it.example) for it in items]
        todo = {}
        for k, it in zip(keys, items):
            if (which, k) not in self._cache and k not in todo:
                todo[k] = it.example
        if todo:
            lps = token_logprobs(model, list(todo.values()), self.tokenizer.pad_token_id, self.params.batch_size,
                                 desc=f"{which} log-probs")
            for k, lp in zip(todo, lps):
                self._cache[(which, k)] = lp
        return [self._cache[(which, k)] for k in keys]

    def target(self, items: list[Item]) -> list[np.ndarray]:
        return self._score("target", items)

    def reference(self, items: list[Item]) -> list[np.ndarray]:
        known = [it.reference is not None for it in items]
        missing = [it for it, k in zip(items, known) if not k]
        computed = iter(self._score("reference", missing)) if missing else iter(())
        return [it.reference if k else next(computed) for it, k in zip(items, known)]

    def precompute(self, sources: list[str], reference: bool) -> None:
        """One batched pass per model over every item the requested attacks will read."""
        items = [it for s in sources for it in self.items(s, optional=True)]
        self.target(items)
        if reference:
            self.reference(items)

    def cache_rows(self) -> list[dict]:
        return [{"key": k, "model": m, "model_fingerprint": self.fingerprints.get(m, ""),
                 "logprobs": lp.astype(np.float32).tolist()} for (m, k), lp in sorted(self._cache.items())]
