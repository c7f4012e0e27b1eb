"""What attacks score, and the log-probability cache they share.

``AttackContext.items(source)`` builds the items of a source: ``canaries`` (every kind; members
and non-members), ``text`` (the run's own training rows vs as many never-trained rows of the same
dataset; for user-level data, of the same held-in users) or ``users`` (the attacker's samples of held-in and
held-out users). Who is a member is read from the run's manifest (``finetune.schema.read_manifest``), never
drawn again here. ``target(items)`` and
``reference(items)`` return per-token log-probabilities of the labelled positions under the
fine-tuned model and the reference (base) model; each (model, example) is computed once, in one
length-bucketed batched pass, and kept in a table keyed by model fingerprint and example hash that
the stage writes as a DVC output (logprobs.parquet).
"""
from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..canaries.schema import (
    AUDIT_USERS_KIND,
    FORMATTED_FILE,
    load_canary_users,
    read_audit_users,
    read_canaries,
    read_formatted,
    read_reference,
)
from ..finetune.schema import EXTERNAL_DIR, RunRecord, TextSetup, read_manifest
from ..reference.params import ReferenceParams
from ..reference.schema import REFERENCE_RECORD, recipe_of
from ..secrets.schema import secrets_path
from ..shared.core.artifacts import Locations
from ..shared.core.errors import ConfigError
from ..shared.core.io import file_digest, read_json
from ..shared.datasets import DATASETS, DatasetSpec, read_split
from ..shared.datasets.users import apply_canary_users
from ..shared.lm.canary_lm import CanaryLM
from ..shared.lm.examples import Example, bos_id, canary_examples, make_example, text_examples
from ..shared.lm.external import load_external
from ..shared.lm.loading import load_base
from ..shared.lm.token_stats import TokenScores, score_tokens
from ..shared.lm.trainable import TRAINABLE, Trainable, load_model


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
    candidates: np.ndarray | None = None  # canaries: the secret tokens of the kind (the contrast scores' field)
    secret_tokens: int = 0  # canaries: labelled tokens that are the secret (the last ones)


def example_key(e: Example) -> str:
    h = hashlib.sha1(e.ids.tobytes())
    h.update(e.labels.tobytes())
    return h.hexdigest()


class AttackContext:
    """Everything the attacks of one run read: the run's record, its models (loaded lazily), its items,
    and the log-probability cache."""

    def __init__(self, run: str, params, where: Locations, record: RunRecord, dataset: DatasetSpec, device,
                 references: ReferenceParams | None = None):
        self.run, self.params, self.where, self.info, self.device = run, params, where, record, device
        self.references = references or ReferenceParams(out_dir="", sets={})  # RMIA's (the reference section)
        self.run_dir = where.run_dir(run)
        self.setup = TextSetup.of(record.params)
        self.dataset = dataset  # the run's dataset's spec (the caller resolves it from the params it read)
        self._target = None
        self._reference = None
        self._refsets: dict[str, object] = {}  # RMIA's reference fine-tunes, by set name (loaded lazily)
        self._items: dict[str, list[Item]] = {}
        self._cache: dict[tuple[str, str], np.ndarray] = {}
        self._contrast: dict[tuple[str, str], tuple] = {}  # (model, item key) -> (contrast_at rows, unit hidden)
        self.fingerprints: dict[str, str] = {}

    # ------------------------------------------------------------------ models
    @property
    def target_model(self):
        if self._target is None:
            if self.info.external:  # trained elsewhere: the imported copy (stages.finetune.external)
                self._target, self.tok = load_external(self.run_dir / EXTERNAL_DIR, self.where.base_model,
                                                       self.device)
                files = self.info.external["files"]
                self.fingerprints["target"] = hashlib.sha1(json.dumps(files, sort_keys=True).encode()).hexdigest()
                return self._target
            spec = self.info.trainable
            self._target, self.tok = load_model(self.where.base_model, self.run_dir, spec, self.device)
            self.fingerprints["target"] = file_digest(self.run_dir / TRAINABLE, "sha1")
        return self._target

    @property
    def tokenizer(self):
        _ = self.target_model  # loads the model and its tokenizer
        return self.tok

    @property
    def reference_model(self):
        """The model before fine-tuning: base weights, new-token rows at their initialisation."""
        if self._reference is None:
            base, _ = load_base(self.where.base_model, self.device)
            init = self.info.new_token_init
            self._reference = CanaryLM(base, num_new=self.info.num_new_tokens, init=init).to(self.device)
            src = read_json(self.where.base_model / "source.json", "base_model")
            self.fingerprints["reference"] = hashlib.sha1(json.dumps([src, init]).encode()).hexdigest()
        return self._reference

    @functools.cached_property
    def reference_sets(self) -> list[str]:
        """RMIA's reference fine-tunes of this run's recipe and dataset (``reference.sets``, trained by
        ``stages.reference``), in params order: a set is shared by every run whose recipe it was trained on."""
        out = []
        for name in self.references.sets:
            f = Path(self.references.out_dir) / name / REFERENCE_RECORD
            if f.is_file() and read_json(f, f"reference@{name}")["recipe"] == recipe_of(self.info.params):
                out.append(name)
        return out

    def _refset_model(self, name: str):
        if name not in self._refsets:
            d = Path(self.references.out_dir) / name
            spec = Trainable.from_json(read_json(d / REFERENCE_RECORD, f"reference@{name}")["trainable"])
            self._refsets[name], _ = load_model(self.where.base_model, d, spec, self.device)
            self.fingerprints[f"reference_set:{name}"] = file_digest(d / TRAINABLE, "sha1")
        return self._refsets[name]

    # ------------------------------------------------------------------ items
    def has(self, need: str) -> str | None:
        """None if the run provides ``need``, else why not (for the one-line error)."""
        if "|" in need:
            reasons = [self.has(n) for n in need.split("|")]
            return None if any(r is None for r in reasons) else " and ".join(r for r in reasons if r)
        if need == "canaries":
            return None if self.info.has_canaries else \
                f"run {self.run} was trained without canaries (finetune.canaries: false)"
        if need == "text":
            return None
        if need == "formatted":
            if not (self.where.canaries / FORMATTED_FILE).is_file():
                return f"no formatted canaries in {self.where.canaries} (canaries.formatted.enabled: false)"
            return None if self.info.has_formatted else \
                f"run {self.run} was trained without the formatted canaries (finetune.canaries: false)"
        if need == "users":
            with_users = [d for d in DATASETS if DATASETS.get(d).users]
            return None if self.dataset.users else (
                f"run {self.run} was fine-tuned on {self.dataset.name}, which has no users "
                f"(user inference needs finetune.dataset: {' or '.join(with_users)})")
        if need == "reference":
            ok = (self.where.base_model / "config.json").is_file()
            return None if ok else f"no base model at {self.where.base_model}"
        if need == "initial_rows":  # the whitebox score reads vocabulary secrets' starting rows off the frozen head
            if self.info.external:
                return f"run {self.run} was trained elsewhere, so which rows stayed frozen is not known"
            return None if not self.info.trainable.train_embeddings else (
                f"run {self.run} trained the output head (finetune.train_embeddings), so the rows its secrets "
                "started from are not in the model")
        if need == "references":
            return None if self.reference_sets else (
                f"no reference fine-tune of run {self.run}'s recipe in {self.references.out_dir or 'none'} "
                "(reference.sets: the RMIA profile, presets/rmia.args, trains them)")
        if need.startswith("secrets:"):
            return self._has_secrets(need.split(":", 1)[1])
        return f"unknown requirement {need!r}"

    def _has_secrets(self, want: str) -> str | None:
        """``want``: a dataset's secrets (tofu: author attributes), or ``text``: verbatim secrets of the run's own
        text (Enron's, or a text dataset's that params give secrets)."""
        text = want == "text"

        def carries(spec) -> bool:
            return bool(spec.secrets and spec.texts) if text else spec.secrets == want

        if not carries(self.dataset):
            carriers = [d for d in DATASETS if carries(DATASETS.get(d))]
            also = " or a text dataset with secrets.datasets.<name>" if text else ""
            return (f"run {self.run} was fine-tuned on {self.dataset.name}, not on data with {want} secrets "
                    f"(needs finetune.dataset: {' or '.join(carriers)}{also})")
        f = secrets_path(self.where.secrets, self.dataset.secrets)
        return None if f.is_file() else f"no secrets file {f} (run the secrets@{self.dataset.secrets} stage)"

    def items(self, source: str, optional: bool = False) -> list[Item]:
        if source not in self._items:
            why = self.has(source)
            if why:
                if optional:
                    return []
                raise ConfigError(why)
            self._items[source] = getattr(self, f"_build_{source}")()
        return self._items[source]

    @functools.cached_property
    def manifest(self) -> dict[str, list[dict]]:
        """The run's manifest rows by source (rank order)."""
        out: dict[str, list[dict]] = {}
        for r in read_manifest(self.run_dir):
            out.setdefault(r["source"], []).append(r)
        return out

    def membership(self, source: str) -> dict[str, bool]:
        """candidate id -> member, as the fine-tune recorded it."""
        return {r["candidate_id"]: r["member"] for r in self.manifest.get(source, [])}

    def _build_canaries(self) -> list[Item]:
        tok, objective = self.tokenizer, self.setup.objective
        meta, canaries = read_canaries(self.where.canaries)
        member = self.membership("canary")
        reference = read_reference(self.where.canary_reference)
        # the text zlib compresses: new tokens decode to nothing, as under the base tokenizer (an external run's
        # tokenizer spells them <|canary_j|>, whose digits would make zlib differ from the loss per canary)
        vocab = meta["base_vocab_size"]
        canaries = canaries if self.info.params["canaries"] else {}
        if self.info.params["user_canaries"]:  # the user-level audit's rows: no reference log-probs (contrast
            canaries = {**canaries, AUDIT_USERS_KIND: read_audit_users(self.where.canaries)[1]}  # reads none)
        out = []
        for kind, rows in canaries.items():
            field = np.unique(np.concatenate([np.asarray(r["secret_ids"], dtype=np.int64) for r in rows]))
            for r, e in zip(rows, canary_examples(rows, objective)):
                ref = np.asarray([] if kind == AUDIT_USERS_KIND else reference[r["canary_id"]], dtype=np.float32)
                n = int((e.labels != -100).sum())
                shown = r["secret_ids"] if objective == "sft" else r["prefix_ids"] + r["secret_ids"]
                out.append(Item(r["canary_id"], kind, member[r["canary_id"]], e,
                                tok.decode([i for i in shown if i < vocab]),
                                reference=ref[-n:] if len(ref) else None, candidates=field,
                                secret_tokens=len(r["secret_ids"])))
        return out

    @functools.cached_property
    def canary_users(self) -> dict[str, dict]:
        return load_canary_users(self.where.canaries, self.dataset.name) if self.dataset.users else {}

    def _build_text(self) -> list[Item]:
        """The run's trained pairs against as many never-trained ones (``params.text_items`` of each side at most),
        as the fine-tune drew them."""
        tok, setup = self.tokenizer, self.setup
        rows = self.manifest.get("text", [])
        sides = {m: [r for r in rows if r["member"] is m] for m in (True, False)}
        n = len(sides[True]) if self.params.text_items is None else min(self.params.text_items, len(sides[True]))
        out = []
        for member, tag in ((True, "member"), (False, "heldout")):
            side = sides[member][:n]
            exs = text_examples([(r["prompt"], r["target"]) for r in side], tok, setup.max_length, setup.objective)
            for r, e in zip(side, exs):
                out.append(Item(r["candidate_id"], "text", member, e, tok.decode(e.ids[e.labels != -100])))
        return out

    def _build_formatted(self) -> list[Item]:
        """Every candidate of every format, scored on the whole sentence (exposure ranks them)."""
        tok = self.tokenizer
        inserted = self.membership("formatted")
        return [Item(r["canary_id"], r["format"], inserted[r["canary_id"]],
                     make_example([bos_id(tok)], tok(r["text"], add_special_tokens=False)["input_ids"], "nwp",
                                  "formatted"),
                     r["text"], repetitions=r["repetitions"]) for r in read_formatted(self.where.canaries) or []]

    def _build_users(self) -> list[Item]:
        """The attacker's samples of every user (never trained on), canary users' substrings inserted."""
        cu, held_in = self.canary_users, self.membership("user")
        key, text = self.dataset.user_columns
        rows = apply_canary_users(read_split(self.where.processed, self.dataset, "attacker"), cu,
                                  self.dataset.user_columns)
        exs = text_examples(self.dataset.pairs(rows), self.tokenizer, self.setup.max_length, self.setup.objective)
        return [Item(r[key], "canary_users" if r["user"] in cu else "users", held_in[r["user"]], e,
                     r[text], user=r["user"]) for r, e in zip(rows, exs)]

    # ------------------------------------------------------------------ log-probabilities
    def _score(self, which: str, items: list[Item]) -> list[TokenScores]:
        """Every labelled token of the items under one model (``lm.token_stats``), each example computed once;
        canary items get their contrast rows (``lm.scoring.contrast_at``) from the same forward pass."""
        model = {"target": lambda: self.target_model, "reference": lambda: self.reference_model}.get(
            which, lambda: self._refset_model(which.split(":", 1)[1]))()
        keys = [example_key(it.example) for it in items]
        todo: dict[str, Item] = {}
        for k, it in zip(keys, items):
            if (which, k) not in self._cache and k not in todo:
                todo[k] = it
        if todo:
            cands = [it.candidates for it in todo.values()]
            scored, extra = score_tokens(model, [it.example for it in todo.values()], self.tokenizer.pad_token_id,
                                         self.params.batch_size, desc=f"{which} log-probs", candidates=cands,
                                         moments=which == "target")  # Min-K%++ reads the fine-tuned model's only
            for k, sc, x in zip(todo, scored, extra):
                self._cache[(which, k)] = sc
                if x is not None:
                    self._contrast[(which, k)] = x
        return [self._cache[(which, k)] for k in keys]

    def contrast(self, which: str, items: list[Item], hidden: bool = False) -> list:
        """Per canary item, the ``CONTRAST_FIELDS`` rows of its secret positions under ``which`` model (with
        ``hidden``: the unit hidden states there instead)."""
        keys = [example_key(it.example) for it in items]
        if any((which, k) not in self._contrast for k in keys):
            drop = set(keys)
            self._cache = {key: v for key, v in self._cache.items() if key[0] != which or key[1] not in drop}
            self._score(which, items)
        return [self._contrast[(which, k)][int(hidden)][-it.secret_tokens:] for k, it in zip(keys, items)]

    def target(self, items: list[Item]) -> list[np.ndarray]:
        return [sc.logprobs for sc in self._score("target", items)]

    def scores_of(self, reference_set: str, items: list[Item]) -> list[np.ndarray]:
        """Token log-probabilities under RMIA's reference fine-tune ``reference_set`` (cached as any model's)."""
        return [sc.logprobs for sc in self._score(f"reference_set:{reference_set}", items)]

    def target_tokens(self, items: list[Item]) -> list[TokenScores]:
        """The fine-tuned model's ``TokenScores`` (top-1 hits, vocabulary moments) from the same cached pass."""
        return self._score("target", items)

    def reference(self, items: list[Item]) -> list[np.ndarray]:
        known = [it.reference is not None for it in items]
        missing = [it for it, k in zip(items, known) if not k]
        computed = iter(self._score("reference", missing)) if missing else iter(())
        return [it.reference if k else next(computed).logprobs for it, k in zip(items, known)]

    def precompute(self, sources: list[str], reference: bool) -> None:
        """One batched pass per model over every item the requested attacks will read."""
        items = [it for s in sources for it in self.items(s, optional=True)]
        self.target(items)
        if reference:
            self.reference(items)

    def cache_rows(self) -> list[dict]:
        return [{"key": k, "model": m, "model_fingerprint": self.fingerprints.get(m, ""),
                 "logprobs": sc.logprobs.astype(np.float32).tolist(), "top1": sc.top1.astype(bool).tolist(),
                 "vocab_mean": None if sc.vocab_mean is None else sc.vocab_mean.astype(np.float32).tolist(),
                 "vocab_sd": None if sc.vocab_sd is None else sc.vocab_sd.astype(np.float32).tolist()}
                for (m, k), sc in sorted(self._cache.items())]
