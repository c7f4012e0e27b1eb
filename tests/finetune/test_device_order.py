"""The model reaches its device before any DP wrapping, and its LoRA weights change under DP steps on the device used
(CUDA where there is one, else the CPU). Hooks registered on a PEFT model before its parameters reach the device
(opacus#820, peft#3409) left LoRA weights unchanged on CUDA while the loss fell and epsilon accrued: not a privacy
failure, so the DP self-check does not judge it; this check does (tests/testkit/mutants.py: ``lora_device_late``)."""
import pytest
import torch
from testkit import mutants
from testkit.models import canary_rows, dp_params, tiny_canary_lm

from stages.finetune.loop import TrainConfig, train
from stages.shared.lm.examples import canary_examples

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
STEPS = 3


def lora_weights(model) -> dict[str, torch.nn.Parameter]:
    return {n: p for n, p in model.named_parameters() if mutants.LORA in n}


def unmoved_lora(model, tok, mode: str) -> list[str]:
    """DP steps through ``loop.train`` (where the model is wrapped); the LoRA tensors that did not change or are not
    on ``DEVICE`` after them. Asserts the run itself looked normal: every step accounted, epsilon spent."""
    before = {n: p.detach().clone() for n, p in lora_weights(model).items()}
    examples = canary_examples([c for c in canary_rows(model.base_vocab, 40, 0) if c["member"]], "sft")
    result = train(model, examples, TrainConfig(
        steps=STEPS, batch_size=10, physical_batch_size=4, lr=1e-2, weight_decay=0.0, clip_norm=1.0, seed=0,
        pad_id=tok.pad_token_id, dp=dp_params(enabled=True, epsilon=8.0, delta=1e-5, grad_sample_mode=mode),
        progress=False))
    assert result.privacy.dp and result.privacy.accounted_steps == STEPS and result.privacy.epsilon_spent > 0
    after = lora_weights(model)
    assert set(after) == set(before)
    return sorted(n for n, p in after.items()
                  if p.device.type != DEVICE.type or torch.equal(p.detach(), before[n].to(p.device)))


@pytest.mark.parametrize("mode", ["hooks", "bk"])
def test_lora_weights_change_under_dp_on_the_device_used(tiny_base, mode):
    """The fine-tune's own build path (``lm.trainable.build_model`` on the device) leaves every parameter on the
    device before ``train`` wraps anything; after DP steps every LoRA tensor (lora_A and lora_B) has changed there."""
    torch.manual_seed(0)
    model, tok = tiny_canary_lm(tiny_base, DEVICE)
    assert lora_weights(model) and {p.device.type for p in model.parameters()} == {DEVICE.type}
    assert unmoved_lora(model, tok, mode) == []


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_check_catches_lora_weights_left_behind_by_a_late_move(tiny_base, seed):
    """With the late move emulated (the DP optimizer keeps LoRA tensors the model no longer computes with), the run
    still accounts every step and spends epsilon, and the check finds every LoRA tensor unchanged."""
    torch.manual_seed(seed)
    model, tok = tiny_canary_lm(tiny_base, DEVICE)
    with mutants.lora_device_late():
        left = unmoved_lora(model, tok, "hooks")
    assert left == sorted(lora_weights(model))
