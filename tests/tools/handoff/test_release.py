"""``leakaudit release`` (stages/tools/handoff/release.py): a run's model as a plain transformers model that computes
the
run's own logits, written alone: no membership file, no auditor record, a manifest of what was left out."""
import json

import pytest
import torch
from testkit.models import NUM_NEW, SECRET_ROWS
from testkit.models import tiny_canary_lm as tiny_model
from testkit.records import run_record

from stages.finetune.schema import AUDITOR_FILE, MANIFEST_FILE, PrivacyRecord, write_run
from stages.shared.core.errors import ConfigError
from stages.shared.core.io import write_json
from stages.shared.lm.trainable import save_model
from stages.tools.handoff.release import LEFT_OUT, RELEASE_MANIFEST, causal_lm, release


def _trained(tiny_base, **overrides):
    """A tiny run whose every trainable tensor moved (LoRA B off zero, own rows apart from the base's)."""
    torch.manual_seed(0)
    model, tok = tiny_model(tiny_base, **overrides)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(0.05 * torch.randn_like(p))
    return model.eval(), tok


def _ids(model) -> torch.Tensor:
    """Base tokens, secret-row ids and new tokens mixed."""
    v = model.base_vocab
    return torch.tensor([[1, SECRET_ROWS[0], v, 7, v + NUM_NEW - 1, SECRET_ROWS[-1], 3, v + 1]])


def _full_logits(model, ids) -> torch.Tensor:
    hidden, new_logits = model(ids)
    rows, cols = torch.zeros(ids.shape[1], dtype=torch.long), torch.arange(ids.shape[1])
    return model.logits_at(hidden, new_logits, rows, cols)


@pytest.mark.parametrize("paradigm", ["lora", "full"])
def test_the_released_model_computes_the_runs_logits(tiny_base, paradigm):
    model, _ = _trained(tiny_base, paradigm=paradigm)
    ids = _ids(model)
    with torch.no_grad():
        want = _full_logits(model, ids)
        got = causal_lm(model)(input_ids=ids).logits[0]
    assert got.shape == (ids.shape[1], model.base_vocab + NUM_NEW)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_prompt_tuning_has_no_plain_form(tiny_base):
    model, _ = _trained(tiny_base, paradigm="prompt", virtual_tokens=3)
    with pytest.raises(ConfigError, match="release: prompt and prefix tuning"):
        causal_lm(model)


def test_release_writes_the_model_alone_and_it_loads_with_transformers(tiny_base, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, _ = _trained(tiny_base)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    save_model(model, run_dir)
    write_run(run_dir / "run.json", run_record(
        PrivacyRecord(dp=True, epsilon_spent=8.0, sample_rate=0.1, steps=10, delta=1e-5), trainable=model.spec,
        base_model={"architecture": "LlamaForCausalLM", "sha256": "x"}))
    write_json(run_dir / AUDITOR_FILE, {"n_examples": 1399})
    (run_dir / MANIFEST_FILE).write_bytes(b"membership")
    out = tmp_path / "released"
    manifest = release("r", run_dir, tiny_base, out)
    names = {p.name for p in out.iterdir()}
    assert not names & {MANIFEST_FILE, AUDITOR_FILE, "run.json", "trainable.safetensors", "adapter"}
    assert {"config.json", "model.safetensors", RELEASE_MANIFEST} <= names
    assert set(manifest["left_out"]) == {MANIFEST_FILE, AUDITOR_FILE, "run.json", "trainable.safetensors", "adapter"}
    assert manifest["left_out"] == {k: LEFT_OUT[k] for k in manifest["left_out"]}
    assert json.loads((out / RELEASE_MANIFEST).read_text()) == manifest
    lm = AutoModelForCausalLM.from_pretrained(out).eval()
    AutoTokenizer.from_pretrained(out)
    ids = _ids(model)
    with torch.no_grad():
        torch.testing.assert_close(lm(input_ids=ids).logits[0], _full_logits(model, ids), rtol=1e-4, atol=1e-4)
    assert not list(tmp_path.glob(".released.tmp-*"))
