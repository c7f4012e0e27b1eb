"""Loading a model trained elsewhere: a whole HF directory or a PEFT adapter over the base, both scored through
the same CanaryLM interface as the pipeline's own runs."""
import numpy as np
import pytest
import torch

from stages.shared.core.errors import DataError
from stages.shared.lm.examples import make_example
from stages.shared.lm.external import load_external, model_kind
from stages.shared.lm.scoring import token_logprobs

CPU = torch.device("cpu")


def _examples():
    return [make_example([0, 5, 9], [17, 23, 42], "sft", "text"), make_example([0, 7], [11, 12, 13, 14], "nwp", "text")]


def test_a_peft_adapter_over_the_base_scores_as_the_adapted_model(tiny_base, tmp_path):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(tiny_base, dtype=torch.float32)
    peft = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                           init_lora_weights=False))
    peft.save_pretrained(tmp_path / "adapter")
    AutoTokenizer.from_pretrained(tiny_base).save_pretrained(tmp_path / "adapter")
    assert model_kind(tmp_path / "adapter") == "peft"
    model, tok = load_external(tmp_path / "adapter", tiny_base, CPU)
    got = token_logprobs(model, _examples(), tok.pad_token_id, 8)
    peft.eval()
    with torch.no_grad():
        for e, lp in zip(_examples(), got):
            logits = peft(input_ids=torch.as_tensor(e.ids)[None]).logits[0].float().log_softmax(-1)
            pos = np.nonzero(e.labels != -100)[0]
            want = logits[pos - 1, torch.as_tensor(e.ids[pos])].numpy()
            np.testing.assert_allclose(lp, want, rtol=1e-4, atol=1e-5)
    plain, _ = load_external(tiny_base, tiny_base, CPU)  # the base itself as an HF directory: LoRA changed the scores
    assert not np.allclose(token_logprobs(plain, _examples()[:1], tok.pad_token_id, 8)[0], got[0])


def test_a_directory_that_is_no_model_is_a_one_line_error(tmp_path):
    with pytest.raises(DataError, match="neither a Hugging Face model directory"):
        model_kind(tmp_path)
