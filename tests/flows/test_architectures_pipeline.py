"""The whole DAG (`dvc repro`) on a tiny random GPT-2, Qwen2 and GPT-NeoX (Llama: test_pipeline.py): on GPT-2 (its
Conv1D layers) LoRA without DP, LoRA under DP (bk), full fine-tuning under DP (ghost) and full fine-tuning with the
embeddings under DP (hooks); on Qwen2 and GPT-NeoX the run users get by default, LoRA (its targets resolved per
architecture) under DP with bk. Every clipping mode against hooks on every architecture and paradigm is the fast
tier's (tests/finetune/test_architectures.py): what a pipeline adds per architecture is the targets, the record and
the stages reading them. The LoRA targets left to
``auto``; only the loss attack, one dataset, no secrets. GPT-2's pipeline goes to the report; the other two stop at
the audit (the report reads the metrics, whatever the architecture)."""
import json
import math
import re

import pytest
import yaml
from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as PEFT_TARGETS
from testkit.project import copy_project, run, tiny_params, without_replicas

pytestmark = pytest.mark.slow

ARCHITECTURES = {"gpt2": "GPT2LMHeadModel", "qwen2": "Qwen2ForCausalLM", "gpt_neox": "GPTNeoXForCausalLM"}
DP = {"enabled": True, "epsilon": 8.0}
RUNS = {name: {"dataset": "personachat", "secrets": "none", **run} for name, run in {
    "lora_nondp": {},
    "lora_dp": {"dp": {**DP, "grad_sample_mode": "bk"}},
    "full_dp": {"paradigm": "full", "dp": {**DP, "grad_sample_mode": "ghost"}},
    "full_emb_dp": {"paradigm": "full", "train_embeddings": True, "dp": {**DP, "grad_sample_mode": "hooks"}}}.items()}
#: arch -> its runs (each run adds a fine-tune and an attack stage: the other two run only what is theirs)
ARCH_RUNS = {"gpt2": list(RUNS), "qwen2": ["lora_dp"], "gpt_neox": ["lora_dp"]}


def arch_params(model_dir, runs: list[str]) -> dict:
    """tiny_params cut to what RUNS need: personachat only, no secrets, two canary kinds, the loss attack."""
    p = tiny_params(model_dir)
    p["preprocess"]["datasets"] = {"personachat": p["preprocess"]["datasets"]["personachat"]}
    p["secrets"]["datasets"] = {}
    p["canaries"].update(kinds=["new_token", "random"])
    p["canaries"]["users"].update(enabled=False, dataset="personachat")  # the canaries stage's dep: a processed one
    p["canaries"]["formatted"]["enabled"] = False
    p["finetune"]["lora"]["targets"] = "auto"
    p["runs"] = {name: RUNS[name] for name in runs}
    without_replicas(p)
    p["attack"].update(attacks=["loss"], runs={name: None for name in runs})
    p["audit"]["exploratory"].update(k_pos=[5], k_neg=[0])
    return p


def non_finite(x, path: str = "") -> list[str]:
    if isinstance(x, dict):
        return [bad for k, v in x.items() for bad in non_finite(v, f"{path}.{k}".lstrip("."))]
    if isinstance(x, list):
        return [bad for i, v in enumerate(x) for bad in non_finite(v, f"{path}[{i}]")]
    if isinstance(x, float) and not math.isfinite(x) or x in ("nan", "inf", "-inf"):
        return [f"{path}={x}"]
    return []


@pytest.mark.parametrize("arch", list(ARCH_RUNS))
def test_every_paradigm_and_clipping_mode_runs_end_to_end(arch, tiny_model_dir_of, tmp_path):
    runs = {name: RUNS[name] for name in ARCH_RUNS[arch]}
    dest = copy_project(tmp_path)
    (dest / "params.yaml").write_text(yaml.safe_dump(arch_params(tiny_model_dir_of(arch), list(runs)), sort_keys=False))
    for folder in ("data/secrets", "data/reference/secrets"):  # the fine-tune's and the report's dependencies on
        (dest / folder).mkdir(parents=True)  # secrets (and their base-model check), with none extracted
    run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qam", f"tiny {arch}"], dest)
    last = "report" if arch == "gpt2" else "audit"
    out = run(["dvc", "repro", last], dest).stdout
    ran = set(re.findall(r"Running stage '([^']+)'", out))
    assert {f"{stage}@{r}" for stage in ("finetune", "attack") for r in runs} | {"audit", last} <= ran
    metrics = json.loads((dest / "reports/metrics.json").read_text())
    assert set(metrics["runs"]) == set(runs)
    report = (dest / "reports/report.md").read_text() if last == "report" else None
    for name, over in runs.items():
        r = metrics["runs"][name]
        assert non_finite(r) == (["privacy.epsilon_spent=inf"] if name == "lora_nondp" else []), name
        for kind in ("new_token", "random"):
            assert 0 <= r["attacks"]["loss"][kind]["auroc"] <= 1
        assert {"eps_lb_95", "gdp_eps_lb_95"} <= set(r["audit_primary"])
        record = json.loads((dest / f"data/models/{name}/run.json").read_text())
        assert record["base_model"]["architecture"] == ARCHITECTURES[arch]
        lora = over.get("paradigm", "lora") == "lora"
        assert record["trainable"]["lora_targets"] == (PEFT_TARGETS[arch] if lora else "auto"), name
        if lora:
            assert r["trainable"]["lora_targets"] == PEFT_TARGETS[arch]
        mode = over.get("dp", {}).get("grad_sample_mode")
        assert record["privacy"].get("grad_sample_mode") == mode, name
        if mode:
            assert r["privacy"]["epsilon_spent"] == pytest.approx(8.0, rel=0.02)
            assert report is None or re.search(rf"^\| {name} \|.*\| {mode} \|$", report, re.M), name
