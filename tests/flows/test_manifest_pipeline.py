"""End to end: the fine-tune's manifest is the only source of membership downstream, and a fine-tune rerun with
the same inputs changes no structural file (and, almost always, no hash: nothing downstream goes stale)."""
from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
import yaml

from stages.finetune.schema import read_auditor, read_manifest
from support import run

pytestmark = pytest.mark.slow

SOURCE = {"text": "text", "users": "user", "canary_users": "user"}  # a scores group -> its manifest source


def test_every_attacks_member_labels_are_the_manifests(reproduced_template):
    d = reproduced_template.path
    runs = yaml.safe_load((d / "params.yaml").read_text())["runs"]
    checked = set()
    for name in runs:
        manifest = {(r["source"], r["candidate_id"]): r["member"] for r in read_manifest(d / "data/models" / name)}
        record = read_auditor(d / "data/models" / name)  # the member counts: the auditor-only record
        text = [m for (s, _), m in manifest.items() if s == "text"]
        assert sum(text) == record["n_text_rows"] and len(text) == 2 * record["n_text_rows"]
        for kind, n in record["n_member_canaries"].items():
            assert sum(m for (s, c), m in manifest.items() if s == "canary" and c.startswith(f"{kind}-")) == n
        for f in sorted((d / "data/scores" / name).glob("*.parquet")):
            t = pq.read_table(f).to_pylist()
            if f.stem in ("logprobs",) or not t:
                continue
            if "secret_id" in t[0]:  # VMR / AIR: the trained arm is the manifest's
                labels = [(("secret", r["secret_id"]), r["trained"]) for r in t]
            elif "canary_id" in t[0]:  # exposure: inserted secret-sharer canaries
                labels = [(("formatted", r["canary_id"]), r["inserted"]) for r in t]
            elif "item_id" in t[0]:
                labels = [((SOURCE.get(r["group"], "canary"), r["item_id"]), r["member"]) for r in t
                          if SOURCE.get(r["group"], "canary") != "user" or ("user", r["item_id"]) in manifest]
            else:
                continue
            assert labels and all(manifest[key] == member for key, member in labels), f"{name}/{f.name}"
            checked.add(f.stem)
    assert {"loss", "exposure", "vmr", "air", "user_inference"} <= checked


def _dir_files(project, lock: str, stage: str, path: str) -> dict[str, str]:
    """relpath -> md5 of the files of output ``path`` of ``stage`` as ``lock`` (dvc.lock text) recorded them,
    read from the DVC cache's directory listing."""
    (out,) = [o for o in yaml.safe_load(lock)["stages"][stage]["outs"] if o["path"] == path]
    md5 = out["md5"]
    listing = json.loads((project / ".dvc/cache/files/md5" / md5[:2] / md5[2:]).read_text())
    return {e["relpath"]: e["md5"] for e in listing}


#: files of a fine-tuned run whose bytes are floats from training (the rest is structure: who is a member, the
#: run's records, the step log, the adapter's config)
WEIGHTS = ("trainable.safetensors", "adapter/adapter_model.safetensors")


def test_a_finetune_rerun_with_the_same_inputs_leaves_nothing_stale(reproduced_project):
    """`dvc repro -f` of a fine-tune with unchanged inputs writes the same run: every structural file (manifest,
    run.json, auditor.json, step log, adapter config) byte for byte, so the audit's membership and records do
    not move. The weights are the same bytes on almost every rerun, and then nothing downstream goes stale. In 2 of
    the last 3 slow-tier runs (CI's included; never in 22 reruns made alone, under load or not, at other paths,
    environments or hash seeds) they differed in the last float bits (max 2e-9), a CPU float nondeterminism not
    yet located, and the attacks downstream rerun: then the weights must agree to float rounding and the test
    says so (a warning) rather than failing on a difference that is not in the run's content."""
    import warnings

    from safetensors.torch import load_file

    project = reproduced_project
    before = (project / "dvc.lock").read_text()
    old = {f: load_file(project / "data/models/dp" / f) for f in WEIGHTS}
    out = run(["dvc", "repro", "-f", "--single-item", "finetune@dp"], project).stdout
    assert "Running stage 'finetune@dp'" in out
    was, now = (_dir_files(project, lock, "finetune@dp", "data/models/dp")
                for lock in (before, (project / "dvc.lock").read_text()))
    changed = sorted(f for f in set(was) | set(now) if was.get(f) != now.get(f))
    assert set(changed) <= set(WEIGHTS), f"the rerun changed structural files: {changed}"
    status = run(["dvc", "status"], project).stdout
    if not changed:
        assert "up to date" in status, status  # the same bytes, so nothing below reruns
        return
    for f in changed:
        new = load_file(project / "data/models/dp" / f)
        for name, t in old[f].items():
            diff = float((new[name] - t).abs().max())
            assert diff <= 1e-6 * max(float(t.abs().max()), 1e-3), (f, name, diff)
    warnings.warn(f"finetune rerun: {changed} differ in the last float bits (downstream reruns)")
