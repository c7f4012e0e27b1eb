"""The training set of a run, exported for training elsewhere (``leakaudit export-canaries``), and the sealed
membership file that lets the pipeline audit the model trained on it (``stages.finetune.external``).

The export is what ``finetune@<run>`` would train on: the run's text rows, its member canaries and the inserted
secret-sharer canaries (each repeated its number of times), shuffled by the run's seed, each with a stable opaque
id. It holds no membership column and no non-member canary, so whoever trains cannot tell which canaries the
audit will test as members. Next to it:

* ``tokenizer/``: the base tokenizer with the canaries' new tokens added (``<|canary_j|>`` = id base vocab + j);
  the trainer must train with it (resize the embedding to its length);
* ``export.json``: what was exported, and the sha-256 of the membership file (a commitment: the auditor can show
  the membership was fixed before the model existed).

The membership file (auditor side) maps every opaque id back to its source and records the canary set it was
drawn from and the text setup, so the import refuses a model trained on another export. The format (versions, file
names, canary tokens, the canary set's digest, the membership reader) is the fine-tune stage's
(stages/finetune/sealed.py), which imports it; this module only writes it, beside the CLI.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from pathlib import Path

import numpy as np

from ...canaries.schema import read_canaries
from ...finetune.inputs import gather_inputs
from ...finetune.params import FinetuneParams
from ...finetune.schema import TextSetup
from ...finetune.sealed import (
    DATASET_DIR,
    EXPORT_FILE,
    EXPORT_VERSION,
    MEMBERSHIP_VERSION,
    TOKENIZER_DIR,
    TRAIN_FILE,
    canaries_digest,
    canary_token,
)
from ...shared.core.artifacts import Locations
from ...shared.core.errors import DataError
from ...shared.core.io import atomic_dir, atomic_file, read_json
from ...shared.core.seeds import stream
from ...shared.datasets import DatasetSpec
from ...shared.lm.examples import Example, bos_id
from ...shared.lm.loading import load_tokenizer

log = logging.getLogger("stages.tools.handoff")


def export_tokenizer(base_dir: Path, num_new: int):
    """The base tokenizer with the new canary tokens added at ids base vocab + j (checked)."""
    from transformers import AddedToken

    tok = load_tokenizer(base_dir)
    first = len(tok)
    tok.add_tokens([AddedToken(canary_token(j), normalized=False, special=False) for j in range(num_new)])
    return tok, first


def _texts(e: Example, tok) -> dict:
    """prompt (the unlabelled start, BOS dropped) and completion (what the run's objective trains on)."""
    ids = e.ids.tolist()
    start = 1 if ids and ids[0] == bos_id(tok) else 0
    first = int(np.argmax(e.labels != -100)) if (e.labels != -100).any() else len(ids)
    prompt, completion = tok.decode(ids[start:first]), tok.decode(ids[first:])
    return {"prompt": prompt, "completion": completion, "text": prompt + completion}


def _opaque(run: str, source: str) -> str:
    return hashlib.sha256(f"{run}\0{source}".encode()).hexdigest()[:16]


def export_run(run: str, ft: FinetuneParams, spec: DatasetSpec, where: Locations, out: Path,
               membership: Path) -> dict:
    """Write run ``run``'s training set to ``out`` and its membership to ``membership``; returns export.json."""
    from datasets import Dataset

    if not ft.canaries:
        raise DataError(f"runs.{run}: finetune.canaries is false: there are no canaries to export")
    meta, canaries = read_canaries(where.canaries)
    tok, first = export_tokenizer(where.base_model, meta["num_new_tokens"])
    if first != meta["base_vocab_size"]:
        raise DataError(f"{where.base_model}: tokenizer has {first} tokens, the canaries were drawn for "
                        f"{meta['base_vocab_size']} (rerun the canaries stage)")
    inputs = gather_inputs(ft, spec, where, canaries, tok)
    sources: list[tuple[str, Example]] = [(f"text:{i:06d}", e) for i, e in enumerate(inputs.text)]
    sources += [(f"canary:{cid}", e) for cid, e in zip(inputs.canary_ids, inputs.canaries)]
    sources += [(f"formatted:{i:06d}", e) for i, e in enumerate(inputs.formatted)]
    order = stream("finetune.export_order").numpy(ft.seed).permutation(len(sources))
    rows, back, roundtrip = [], {}, 0
    for i in order.tolist():
        source, e = sources[i]
        oid = _opaque(run, source)
        rows.append({"id": oid, **_texts(e, tok)})
        back[oid] = source
        if source.startswith("canary:"):
            start = 1 if e.ids[0] == bos_id(tok) else 0
            roundtrip += tok(rows[-1]["text"], add_special_tokens=False)["input_ids"] == e.ids[start:].tolist()
    record = {"version": MEMBERSHIP_VERSION, "run": run, "canaries_digest": canaries_digest(where.canaries),
              "setup": dataclasses.asdict(TextSetup.of(ft)), "objective": ft.objective,
              "members": {k: sorted(r["canary_id"] for r in v) for k, v in inputs.members.items()},
              "non_members": {k: sorted(r["canary_id"] for r in canaries[k] if not r["member"])
                              for k in inputs.members},
              "examples": back}
    blob = json.dumps(record, indent=1, sort_keys=True).encode()
    manifest = {"version": EXPORT_VERSION, "run": run, "rows": len(rows), "text_rows": len(inputs.text),
                "canary_rows": len(inputs.canaries), "formatted_rows": len(inputs.formatted),
                "objective": ft.objective, "base_model": read_json(where.base_model / "source.json", "base_model"),
                "tokenizer": TOKENIZER_DIR, "base_vocab_size": first, "new_tokens": meta["num_new_tokens"],
                "canaries_that_retokenize_exactly": int(roundtrip),
                "membership_sha256": hashlib.sha256(blob).hexdigest()}
    with atomic_dir(out) as tmp:
        with open(tmp / TRAIN_FILE, "w") as fh:
            for r in rows:
                fh.write(json.dumps(r, ensure_ascii=False) + "\n")
        Dataset.from_list(rows).save_to_disk(str(tmp / DATASET_DIR))
        tok.save_pretrained(tmp / TOKENIZER_DIR)
        (tmp / EXPORT_FILE).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        membership.parent.mkdir(parents=True, exist_ok=True)
        with atomic_file(membership) as m:
            m.write_bytes(blob)
    log.info("run %s: exported %d rows (%d text, %d member canaries, %d secret-sharer) to %s", run, len(rows),
             len(inputs.text), len(inputs.canaries), len(inputs.formatted), out)
    return manifest


def export_for(run: str, params_path: Path, out: Path, membership: Path | None) -> dict:
    """``leakaudit export-canaries``: run ``run``'s params from ``params_path``; the membership file goes to
    ``membership``, or to the run's ``external.membership`` when it is already declared external."""
    from ...finetune.params import load_finetune
    from ...shared.core.artifacts import locations
    from ...shared.core.errors import ConfigError
    from ...shared.core.params import read_params
    from ...shared.datasets import get_dataset

    raw = read_params(params_path)
    ft = load_finetune(run, params_path, raw)
    if membership is None:
        if ft.external is None:
            raise ConfigError(f"runs.{run}: not external; pass --membership PATH (where the auditor keeps it)")
        membership = Path(ft.external.membership)
    return export_run(run, ft, get_dataset(ft.dataset, raw), locations(raw, params_path), Path(out), Path(membership))
