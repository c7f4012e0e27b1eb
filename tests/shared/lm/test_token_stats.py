"""The attacks' scoring pass (``lm.token_stats``) against a direct per-token computation on a tiny model, and the
Min-K%++ and EZ-MIA scores built on it against their definitions computed token by token."""
import copy

import numpy as np
import pytest
import torch
from testkit.models import NUM_NEW, SECRET_ROWS, tiny_canary_lm

from stages.attack.scores import ez_score, ez_scores, min_k_pp_scores
from stages.shared.lm.examples import make_example
from stages.shared.lm.scoring import token_logprobs
from stages.shared.lm.token_stats import score_tokens


@pytest.fixture(scope="module", params=["float32", "float64"])
def scored(request, tiny_base):
    """(model, its float64 copy for the direct computation, examples, the pass's TokenScores, tolerance): the pass
    in fp32 as in use (batched and padded, so it differs from a one-by-one pass in the last digits), and the model in
    float64 (the formulas, to 1e-6)."""
    torch.manual_seed(0)
    model, tok = tiny_canary_lm(tiny_base)
    model = model.to(getattr(torch, request.param))
    with torch.no_grad():  # secret rows and new-token rows away from their starting copies, so their use shows
        model.row_head.weight.add_(torch.randn_like(model.row_head.weight))
        model.new_head.weight.add_(torch.randn_like(model.new_head.weight))
    V = model.base_vocab
    rng = np.random.default_rng(0)
    examples = []
    for n in range(9):  # varied lengths: several padded chunks; some labels are new tokens and secret-row tokens
        prompt = rng.integers(3, 300, int(rng.integers(2, 7))).tolist()
        target = rng.integers(3, 300, int(rng.integers(2, 12))).tolist()
        target[0] = [V + n % NUM_NEW, SECRET_ROWS[n % len(SECRET_ROWS)], target[0]][n % 3]
        examples.append(make_example(prompt, target, "sft" if n % 2 else "nwp", "test"))
    got, _ = score_tokens(model, examples, tok.pad_token_id, batch_size=3)
    direct_model = copy.deepcopy(model).double()  # the direct computation's own copy, in float64
    return model, direct_model, examples, got, 1e-5 if request.param == "float32" else 1e-6


def direct(model, e):
    """Per labelled token, from a pass over this example alone and the full softmax written out (float64):
    (log p(label), top-1 hit, E_z log p(z), sd_z log p(z))."""
    ids = torch.as_tensor(e.ids[None, :-1])
    with torch.no_grad():
        hidden, _ = model(ids, torch.ones_like(ids))
        base = model.head(hidden)
        base[..., list(SECRET_ROWS)] = model.row_head(hidden)
        full = torch.cat([base, model.new_head(hidden)], -1)[0].double()
    lsm = full - torch.logsumexp(full, -1, keepdim=True)
    out = []
    for t in np.flatnonzero(e.labels[1:] != -100):
        y = int(e.labels[t + 1])
        row = lsm[t].numpy()
        p = np.exp(row)
        mean = float((p * row).sum())
        out.append((row[y], int(np.argmax(row)) == y, mean, float(np.sqrt((p * (row - mean) ** 2).sum()))))
    return np.array(out, dtype=np.float64)


def test_the_pass_equals_a_direct_per_token_computation(scored):
    model, direct_model, examples, got, tol = scored
    want = [direct(direct_model, e) for e in examples]
    for g, d in zip(got, want):
        np.testing.assert_allclose(g.logprobs, d[:, 0], atol=tol)
        np.testing.assert_array_equal(g.top1, d[:, 1].astype(bool))
        np.testing.assert_allclose(g.vocab_mean, d[:, 2], atol=tol)
        np.testing.assert_allclose(g.vocab_sd, d[:, 3], atol=tol)
    if tol == 1e-5:  # in fp32, the log-probabilities every other attack reads are the fine-tune's scorer's, bit for bit
        for a, b in zip(token_logprobs(model, examples, 0, batch_size=3), got):
            np.testing.assert_array_equal(a, b.logprobs)


def test_min_k_pp_and_ez_mia_equal_their_definitions_token_by_token(scored):
    """Min-K%++ (Zhang et al. 2024, eq. 3) and EZ-MIA (Ilić et al. 2026) written out token by token from the direct
    computation, against the attacks' reducers on the pass's arrays: equal to 1e-6."""
    model, direct_model, examples, got, tol = scored
    rel = 1e-6 if tol == 1e-6 else 1e-4  # fp32: the pass's 1e-5 in log p grows through sd and the ratio
    rng = np.random.default_rng(1)
    refs = [g.logprobs + rng.normal(0, 1, len(g.logprobs)).astype(g.logprobs.dtype) for g in got]  # a reference's
    for k in (0.2, 0.5, 1.0):
        want = []
        for e in examples:
            d = direct(direct_model, e)
            z = sorted((d[i, 0] - d[i, 2]) / d[i, 3] for i in range(len(d)))
            n = max(1, int(np.ceil(len(z) * k)))
            want.append(sum(z[:n]) / n)
        np.testing.assert_allclose(min_k_pp_scores(got, k), want, rtol=rel, atol=tol)
    want = []
    for e, r in zip(examples, refs):
        d = direct(direct_model, e)
        errors = [i for i in range(len(d)) if not d[i, 1]]  # the fine-tuned model's top-1 token is not the label
        shifts = [d[i, 0] - float(r[i]) for i in (errors or range(len(d)))]  # no error: every position
        want.append(sum(max(s, 0.0) for s in shifts) / (sum(max(-s, 0.0) for s in shifts) + 1e-12))
    np.testing.assert_allclose(ez_scores(got, refs, 1), want, rtol=rel)


def test_ez_mia_edge_cases_are_stated():
    lp, ref = np.array([-1.0, -2.0, -3.0]), np.array([-1.5, -1.0, -3.0])
    # no error position (every token the top-1 prediction): the ratio over every position, up 0.5 over down 1.0
    assert ez_score(lp, np.array([True, True, True]), ref, 1) == pytest.approx(0.5)
    assert ez_score(lp, np.array([False, True, True]), ref, 2) == pytest.approx(0.5)  # fewer than min_errors
    # a one-token row: ref_ratio's sign; a memorised secret (top-1, shifted up) ranks above every downward shift
    one = [ez_score(np.array([a]), np.array([t]), np.array([-1.0]), 1) for a, t in ((-1.1, True), (-3.0, False),
                                                                                     (-1.5, False), (-0.7, True))]
    assert one[:3] == [0.0, 0.0, 0.0] and one[3] > 1e10
    assert ez_score(lp, np.array([False, False, True]), ref, 1) == pytest.approx(0.5)  # up 0.5 over down 1.0
    assert ez_score(lp, np.array([False, True, True]), ref, 1) > 1e10  # upward only: above every finite ratio
