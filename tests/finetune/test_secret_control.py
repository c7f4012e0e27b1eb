"""The randomised VMR/AIR control: a seeded coin per secret decides whether the run trains on it."""
import numpy as np

from stages.finetune.text import secret_control
from stages.shared.datasets import get_dataset


def _rows_and_secrets(n_secrets=40, n_rows=120, seed=0):
    rng = np.random.default_rng(seed)
    values = [f"SECRET{i:03d}xyz" for i in range(n_secrets)]
    rows = []
    for j in range(n_rows):
        body = " ".join(f"w{rng.integers(1000)}" for _ in range(20))
        if j < 2 * n_secrets:  # each secret in two rows (some rows hold none)
            body += " " + values[j % n_secrets]
        rows.append({"message_id": f"m{j}", "body": body})
    # the secrets file lists the most frequent first: make frequency order correlate with index
    secrets = [{"secret_id": f"s{i}", "kind": "sequence", "value": v} for i, v in enumerate(values)]
    return rows, secrets


def test_coins_decide_training_and_held_out_secrets_leave_the_training_rows():
    spec = get_dataset("enron")
    rows, secrets = _rows_and_secrets()
    kept, control = secret_control(rows, secrets, spec, 32, seed=0)
    assert control["candidates"] == 32 and len(control["trained"]) + len(control["held_out"]) == 32
    by_id = {s["secret_id"]: s for s in secrets}
    assert not any(spec.trained_secrets(kept, [by_id[i] for i in control["held_out"]]))  # never trained on
    assert all(spec.trained_secrets(kept, [by_id[i] for i in control["trained"]]))  # still there
    assert control["rows_dropped"] == 2 * len(control["held_out"]) == len(rows) - len(kept)
    again = secret_control(rows, secrets, spec, 32, seed=0)
    assert again == (kept, control)  # seeded


def test_assignment_is_random_not_frequency_order():
    """Across seeds every candidate is trained about half the time, whatever its place in the frequency order."""
    spec = get_dataset("enron")
    rows, secrets = _rows_and_secrets()
    share = np.zeros(32)
    for seed in range(200):
        _, control = secret_control(rows, secrets, spec, 32, seed=seed)
        share += np.array([f"s{i}" in control["trained"] for i in range(32)])
    share /= 200
    assert 0.35 < share.min() and share.max() < 0.65
    assert abs(share[:16].mean() - share[16:].mean()) < 0.08  # the more frequent half is not favoured
