"""Every attack on a tiny model with a planted answer, and the requirement errors."""
import copy

import numpy as np
import pytest
import torch
from testkit.data import users_dataset
from testkit.models import make_tiny_lm
from testkit.project import params, project_raw
from testkit.records import run_record

from stages.attack.acr import gcg_shortest_prompt
from stages.attack.catalog import ATTACKS
from stages.attack.context import AttackContext
from stages.attack.exposure import exposures
from stages.attack.inversion import invert, prf
from stages.attack.memorization import attribute_hit, draw_arms, sampled_rates, until_eos, verbatim_share
from stages.attack.params import AttackParams, GenerationParams
from stages.attack.scores import loss_scores, min_k_scores, ratio_scores, zlib_scores
from stages.attack.user_inference import user_scores
from stages.audit.roc import auroc
from stages.canaries.formatted import candidates
from stages.finetune.loop import TrainConfig, train
from stages.shared.core.artifacts import locations
from stages.shared.core.errors import ConfigError
from stages.shared.datasets import get_dataset
from stages.shared.lm.canary_lm import CanaryLM
from stages.shared.lm.examples import make_example
from stages.shared.lm.generate import generate
from stages.shared.lm.scoring import output_rows, token_logprobs

V = 200


def _trained(examples, steps=80, vocab=V, seed=0):
    """(reference = the untrained copy, target = trained on ``examples``) tiny CanaryLMs."""
    torch.manual_seed(seed)
    lm = make_tiny_lm(vocab, seed)
    for p in lm.parameters():
        p.requires_grad_(True)
    ref = CanaryLM(copy.deepcopy(lm)).eval()
    target = CanaryLM(lm)
    train(target, examples, TrainConfig(
        steps=steps, batch_size=min(16, len(examples)), physical_batch_size=16, lr=1e-2, weight_decay=0.0,
        clip_norm=1.0, seed=seed, pad_id=0))
    return ref, target.eval()


def _seqs(n, rng, length=10):
    return [rng.integers(1, V, length).tolist() for _ in range(n)]


def test_membership_reducers_rank_memorized_above_heldout():
    rng = np.random.default_rng(0)
    members, heldout = _seqs(24, rng), _seqs(24, rng)
    ex = lambda seqs: [make_example([s[0]], s[1:], "nwp", "t") for s in seqs]  # noqa: E731
    ref, target = _trained(ex(members))
    all_ex = ex(members) + ex(heldout)
    t, r = token_logprobs(target, all_ex, 0), token_logprobs(ref, all_ex, 0)
    y = np.r_[np.ones(24, bool), np.zeros(24, bool)]
    texts = [" ".join(map(str, s)) for s in members + heldout]
    for name, scores in [("loss", loss_scores(t)), ("ref_ratio", ratio_scores(t, r)),
                         ("zlib", zlib_scores(t, texts)), ("min_k", min_k_scores(t, 0.2))]:
        assert auroc(scores, y) > 0.95, name
    assert min_k_scores([np.array([-1.0, -5.0, -3.0, -2.0])], 0.5)[0] == -4.0


def test_user_inference_separates_held_in_users():
    rng = np.random.default_rng(1)
    users = {f"u{i}": rng.integers(1, V, 4).tolist() for i in range(12)}  # each user's signature
    held_in = [u for i, u in enumerate(users) if i % 2 == 0]

    def doc(u):
        return users[u] + rng.integers(1, V, 6).tolist()

    train_ex = [make_example([1], doc(u), "nwp", "t") for u in held_in for _ in range(8)]
    ref, target = _trained(train_ex, steps=120)
    attacker = [(u, make_example([1], doc(u), "nwp", "t")) for u in users for _ in range(3)]  # never trained on
    exs = [e for _, e in attacker]
    scores = user_scores([u for u, _ in attacker], token_logprobs(target, exs, 0), token_logprobs(ref, exs, 0))
    y = np.array([u in held_in for u in scores])
    assert auroc(np.array(list(scores.values())), y) == 1.0


def test_exposure_of_a_planted_top_fill_is_log2_R():
    px = np.array([30.0, 12.0, 40.0, 35.0, 33.0, 31.0, 50.0, 45.0])
    rank, exp = exposures(px)
    assert rank[1] == 1 and exp[1] == pytest.approx(np.log2(8))
    assert rank[6] == 8 and exp[6] == 0.0


def test_exposure_on_a_trained_tiny_model(tiny_tokenizer):
    template, fills = candidates("name", 16, np.random.default_rng(0), [])
    enc = lambda t: tiny_tokenizer(t, add_special_tokens=False)["input_ids"]  # noqa: E731
    inserted = fills[3]
    vocab = len(tiny_tokenizer)
    ref, target = _trained([make_example([0], enc(template.format(inserted)), "nwp", "f")] * 16, steps=40, vocab=vocab)
    lps = token_logprobs(target, [make_example([0], enc(template.format(f)), "nwp", "f") for f in fills], 0)
    rank, exp = exposures(np.array([-lp.sum() for lp in lps]))
    assert rank[3] == 1 and exp[3] == pytest.approx(np.log2(16))


def test_vmr_and_air_on_a_planted_secret(tiny_tokenizer):
    enc = lambda t: tiny_tokenizer(t, add_special_tokens=False)["input_ids"]  # noqa: E731
    prompt, secret = enc("my phone is"), " 713-853-1234"
    ref, target = _trained([make_example(prompt, enc(secret), "sft", "s")] * 16, steps=200, vocab=len(tiny_tokenizer))
    g = params(GenerationParams, "attack.generation", samples=10)
    n = [len(enc(secret))]
    vmr = sampled_rates(target, tiny_tokenizer, [prompt], n, [secret], verbatim_share, g, 16)
    base = sampled_rates(ref, tiny_tokenizer, [prompt], n, [secret], verbatim_share, g, 16)
    assert vmr == [1.0] and base == [0.0]
    air = sampled_rates(target, tiny_tokenizer, [prompt], [n[0] + 2], ["853-1234"], attribute_hit, g, 16)
    assert air == [1.0]


def test_an_answer_ends_at_eos_so_what_follows_is_no_hit(tiny_tokenizer):
    """A model trained to answer " rock", end the reply and write " jazz" after it: the answer is " rock" only."""
    enc = lambda t: tiny_tokenizer(t, add_special_tokens=False)["input_ids"]  # noqa: E731
    eos = tiny_tokenizer.eos_token_id
    prompt, reply = enc("Question: genre?\nAnswer:"), enc(" rock") + [eos] + enc(" jazz")
    _, target = _trained([make_example(prompt, reply, "sft", "s")] * 16, steps=200, vocab=len(tiny_tokenizer))
    g = params(GenerationParams, "attack.generation", samples=10)
    assert generate(target, [prompt], len(reply), temperature=0)[0][0] == reply  # it does write " jazz" after eos
    hits = lambda value: sampled_rates(target, tiny_tokenizer, [prompt], [len(reply)], [value], attribute_hit, g, 16)  # noqa: E731
    assert hits("rock") == [1.0] and hits("jazz") == [0.0]
    assert until_eos([5, 6, eos, 7], eos) == [5, 6] and until_eos([5, 6], eos) == [5, 6] and until_eos([5], None) == [5]


def test_acr_finds_a_prompt_that_elicits_the_memorized_target():
    target_ids = [17, 42, 99, 7]
    ref, target = _trained([make_example([150], target_ids, "sft", "x")] * 20, steps=60)
    prompt = gcg_shortest_prompt(target, target_ids, torch.arange(1, V), max_prompt_tokens=3, top_k=32,
                                 candidates=32, seconds=20)
    assert prompt is not None and len(prompt) <= 3
    assert generate(target, [prompt], len(target_ids), temperature=0)[0][0] == target_ids


@pytest.mark.slow  # trains the inversion network (the pipeline's eia attack runs it end to end too)
def test_eia_inverts_informative_embeddings_only():
    rng = np.random.default_rng(0)
    sents = [rng.integers(0, 50, 8).tolist() for _ in range(40)]
    emb = torch.randn(40, 16)
    p = params(AttackParams, "attack", eia={"steps": 300, "max_length": 8, "width": 64})
    good = invert(emb, sents, emb[:10], sents[:10], p)
    bad = invert(torch.zeros(40, 16), sents, torch.zeros(10, 16), sents[:10], p)
    assert good["f1"] > 0.9 and bad["f1"] < 0.4
    # the baseline: each text decoded from another's embedding recovers no more than the uninformative embeddings do
    assert good["baseline_f1"] < 0.4 and bad["baseline_f1"] == pytest.approx(bad["f1"])
    assert prf([[1, 2, 2]], [[2, 2, 3, 4]]) == {"precision": 2 / 3, "recall": 0.5, "f1": pytest.approx(4 / 7)}


@pytest.mark.parametrize("attack,dataset,canaries,needle", [
    ("user_inference", "personachat", True, "fine-tuned on personachat, which has no users"),
    ("vmr", "personachat", True, "not on data with text secrets"),
    ("air", "enron", True, "not on data with tofu secrets"),
    ("exposure", "personachat", False, "trained without the formatted canaries"),
])
def test_attacks_name_what_a_run_lacks(tmp_path, attack, dataset, canaries, needle):
    raw = project_raw()
    for section, key in (("model", "out"), ("preprocess", "out_dir"), ("secrets", "out_dir"),
                         ("canaries", "out_dir"), ("finetune", "out_dir")):
        raw[section][key] = str(tmp_path / section)
    where = locations(raw)
    (tmp_path / "canaries").mkdir()
    (tmp_path / "canaries" / "formatted.parquet").write_text("")
    record = run_record(params_overrides={"dataset": dataset}, has_canaries=canaries, num_new_tokens=0)
    ctx = AttackContext("r1", params(AttackParams, "attack"), where, record, get_dataset(dataset),
                        device=torch.device("cpu"))
    reasons = [ctx.has(n) for n in ATTACKS.get(attack).needs]
    assert any(r and needle in r for r in reasons), reasons
    assert "no base model at" in ctx.has("reference")
    with pytest.raises(ConfigError, match="unknown attack 'lira'"):
        ATTACKS.get("lira", key="attack.attacks[0]")


@pytest.mark.parametrize("dataset", ["enron", "enron_users"])
def test_the_enron_datasets_carry_text_secrets(tmp_path, dataset):
    """VMR and ACR need verbatim secrets of the run's own text: both Enron datasets carry them (the users run reads
    Enron's secrets file), so only the file's absence is missing here."""
    raw = project_raw()
    raw["secrets"]["out_dir"] = str(tmp_path / "secrets")
    record = run_record(params_overrides={"dataset": dataset}, num_new_tokens=0)
    ctx = AttackContext("r1", params(AttackParams, "attack"), locations(raw), record, get_dataset(dataset),
                        device=torch.device("cpu"))
    assert ctx.has("secrets:text") == f"no secrets file {tmp_path / 'secrets' / 'enron.parquet'} (run the " \
        "secrets@enron stage)"


def test_the_secret_control_arms_are_seeded_draws_not_the_files_frequency_order():
    """The secrets file is sorted by frequency: "the first 12 held-out secrets" made the control the most frequent
    ones. Each arm is now a seeded draw from its own secrets."""
    trained = [True] * 30 + [False] * 20
    t, u = draw_arms(trained, 12, seed=0)
    assert len(t) == len(u) == 12 and all(trained[i] for i in t) and not any(trained[i] for i in u)
    assert u != list(range(30, 42)) and t != list(range(12))  # not the most frequent of either arm
    assert draw_arms(trained, 12, 0) == (t, u) and draw_arms(trained, 12, 1) != (t, u)
    few, ctrl = draw_arms([True] * 3 + [False] * 20, 12, 0)
    assert len(few) == 3 and len(ctrl) == 3  # the control matches the trained arm's size
    assert draw_arms([False] * 5, 4, 0)[0] == [] and len(draw_arms([False] * 5, 4, 0)[1]) == 4


def test_text_non_members_of_user_level_data_are_held_in_users_unseen_rows(tmp_path, tiny_tokenizer):
    """Members are held-in users' trained rows; non-members are never-trained rows of the same held-in users (a
    canary user by its drawn set), not rows of held-out users (a user-inference pool) nor of every user."""
    from stages.canaries.params import CanaryUsersParams
    from stages.canaries.users import build_canary_users
    from stages.finetune.schema import TextSetup
    from stages.finetune.text import RunText
    from stages.shared.datasets import get_dataset

    users_dataset(tmp_path)
    spec = get_dataset("enron_users")
    cu = {c["user"]: c for c in build_canary_users(params(CanaryUsersParams, "canaries.users", lengths=[1],
                                                          per_length=4), spec, tmp_path, tiny_tokenizer, tmp_path)}
    text = RunText(tmp_path, spec, TextSetup("enron_users", "nwp", 32, 16, 0, 0, 0), cu)
    rows = text.held_in_unseen_rows()
    trained_users = {r["user"] for r in text.rows("train")}
    users = {r["user"] for r in rows}
    assert rows and all(r["user_set"] == "held_in" for r in rows)
    assert users == trained_users  # the members' own users, every one of them
    assert all(r["message_id"].startswith("<test") for r in rows)  # never-trained rows only
    assert {u for u in cu if u in users} == {u for u, c in cu.items() if c["user_set"] == "held_in"}  # by the coin


def _contrast_setup(secret_rows: bool):
    """20 canaries (random prefix, one secret token each: a new token, or a vocabulary token with its own rows),
    the even ones members; (untrained model, trained model, canary examples, candidate ids, members)."""
    from stages.attack.membership import contrast_scores

    rng = np.random.default_rng(3)
    secrets = (V + np.arange(20)) if not secret_rows else rng.choice(np.arange(5, V), 20, replace=False)
    exs = [make_example(rng.integers(1, V, 6).tolist(), [int(s)], "sft", "canary:k") for s in secrets]
    members = np.arange(20) % 2 == 0
    models = []
    for trained in (False, True):
        torch.manual_seed(0)
        lm = make_tiny_lm(V, 0)
        m = CanaryLM(lm, num_new=0 if secret_rows else 20, secret_rows=secrets.tolist() if secret_rows else ())
        if trained:
            train(m, [e for e, y in zip(exs, members) if y], TrainConfig(
                steps=40, batch_size=10, physical_batch_size=16, lr=5e-2, weight_decay=0.0, clip_norm=1.0, seed=0,
                pad_id=0))
        models.append(m.eval())
    return models, exs, [np.sort(secrets)] * len(exs), members, contrast_scores


@pytest.mark.parametrize("secret_rows", [False, True])
def test_contrast_scores_start_at_zero_and_read_training(secret_rows):
    (untrained, trained), exs, cands, members, contrast_scores = _contrast_setup(secret_rows)
    _, extra0 = token_logprobs(untrained, exs, 0, candidates=cands)
    rows0 = [x[0] for x in extra0]
    # rows that start equal (new tokens) or from the frozen head (vocabulary secrets): nothing to read before training
    assert np.allclose(contrast_scores(rows0, "final_whitebox"), 0.0, atol=1e-5)
    if not secret_rows:
        assert np.allclose(contrast_scores(rows0), 0.0, atol=1e-5)
    lps, extra = token_logprobs(trained, exs, 0, candidates=cands)
    rows = [x[0] for x in extra]
    assert np.allclose(np.concatenate(lps), np.concatenate(token_logprobs(trained, exs, 0)))  # same pass, same lps
    for field in ("contrast", "z", "final_whitebox"):
        assert auroc(contrast_scores(rows, field), members) > 0.9, field
    # the white-box score: own row's change projected on the initial model's unit hidden state
    h0 = [x[1] for x in extra0]
    assert all(np.allclose(np.linalg.norm(h, axis=1), 1.0, atol=1e-5) for h in h0)
    d = (output_rows(trained, cands[0]) - output_rows(untrained, cands[0])).numpy()
    pos = {int(t): n for n, t in enumerate(cands[0])}
    wb = [float((d[pos[int(e.ids[-1])]] - (d.sum(0) - d[pos[int(e.ids[-1])]]) / (len(d) - 1)) @ h[-1])
          for e, h in zip(exs, h0)]
    assert auroc(np.array(wb), members) > 0.9


def test_the_default_list_leaves_out_what_a_run_cannot_have_and_a_runs_own_list_refuses_it():
    """attack.attacks is meant for any run: an attack whose requirement the run lacks is left out with the reason
    (a run trained elsewhere has no frozen rows for whitebox); a list the run names itself fails, naming its key."""
    from stages.attack.run import plan_attacks

    lacks = {"initial_rows": "run r1 was trained elsewhere, so which rows stayed frozen is not known"}
    has = lacks.get
    p = params(AttackParams, "attack", attacks=["loss", "whitebox", "zlib"], runs={})
    keep, skipped = plan_attacks("r1", p, has)
    assert [a.name for a in keep] == ["loss", "zlib"]
    assert skipped == {"whitebox": lacks["initial_rows"]}
    own = params(AttackParams, "attack", runs={"r1": ["loss", "whitebox"]})
    with pytest.raises(ConfigError, match=r"^attack\.runs\.r1: attack 'whitebox': run r1 was trained elsewhere"):
        plan_attacks("r1", own, has)
    with pytest.raises(ConfigError, match=r"^attack\.attacks: no attack of the list can run on run 'r1' \(whitebox: "):
        plan_attacks("r1", params(AttackParams, "attack", attacks=["whitebox"], runs={}), has)
