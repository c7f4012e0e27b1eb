"""The real secrets found in the training data (counts and base-model reproduction, never their values)."""
from __future__ import annotations

from ...secrets.schema import SECRETS, read_reference
from ...shared.core.formatting import Table
from ...shared.core.io import read_table
from ...shared.datasets import NO_SECRETS
from ..inputs import Inputs
from ..render import Section


def secrets_section(inp: Inputs) -> Section:
    stt = Table(["dataset", "kind", "secrets", "mean occurrences", "base reproduces", "mean base log-prob"])
    folder = inp.where.secrets
    for f in sorted(folder.glob("*.parquet")) if folder.is_dir() else []:
        if f.stem == NO_SECRETS:  # the empty table of the runs whose dataset has none: no dataset of its own
            continue
        base = {r["secret_id"]: r for r in read_reference(inp.where.secret_reference, f.stem)}
        t = read_table(f, SECRETS).to_pandas()
        t["base_greedy"] = [base[i]["base_greedy"] for i in t["secret_id"]]
        t["base_logprob"] = [base[i]["base_logprob"] for i in t["secret_id"]]
        for kind, g in t.groupby("kind"):
            stt.rows.append([f.stem, kind, len(g), float(g["occurrences"].mean()),
                             f"{int(g['base_greedy'].fillna(False).sum())} / {len(g)}",
                             float(g["base_logprob"].mean()) if g["base_logprob"].notna().any() else None])
    return Section("Real secrets in the training data", tables=[stt], paragraphs=[
        "Secrets extracted from the training splits (values are not shown). `base reproduces` = the base model "
        "already continues the prompt with the secret greedily, i.e. leakage that fine-tuning did not cause; "
        "later memorization metrics subtract it."])
