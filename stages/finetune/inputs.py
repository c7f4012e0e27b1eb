"""What a run trains on and evaluates with (``Inputs``, ``gather_inputs``): the dataset's training rows, its held-out
pairs and evaluation rows, the member canaries, the inserted secret-sharer canaries and the secrets' arms. The
fine-tune trains on them, ``leakaudit export-canaries`` exports them (stages/tools/handoff/export.py) and an imported
run
(``external.py``) is checked against them."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..canaries.schema import AUDIT_USERS_KIND, load_canary_users, read_audit_users, read_formatted
from ..secrets.schema import read_secrets, secrets_path
from ..shared.core.artifacts import Locations
from ..shared.core.seeds import stream
from ..shared.datasets import NO_SECRETS, DatasetSpec, read_split
from ..shared.datasets.users import apply_canary_users
from ..shared.lm.examples import Example, bos_id, canary_examples, make_example, text_examples
from .params import FinetuneParams
from .schema import TextSetup
from .text import RunText


@dataclass
class Inputs:
    """What a run trains on and evaluates with."""

    text: list[Example]  # rows of the dataset's training split
    text_pairs: list[tuple[str, str]]  # the same, as (prompt, target)
    heldout_pairs: list[tuple[str, str]]  # as many never-trained pairs (the membership game's other side)
    evals: list[Example]  # rows of its evaluation split (utility)
    members: dict[str, list[dict]]  # kind -> member canaries
    all_canaries: dict[str, list[dict]]  # kind -> every canary of the run's kinds, member or not
    canaries: list[Example]  # the member canaries as examples
    canary_ids: list[str]  # their ids, in the same order
    canary_kinds: list[str]  # their kinds, in the same order
    formatted_rows: list[dict] | None  # every secret-sharer candidate, inserted or not
    formatted: list[Example]  # inserted secret-sharer canaries, each repeated its number of times
    scheduled: list[Example]  # canaries on a fixed schedule (canary_insertion: repetitions), else []
    canary_users: dict[str, dict]
    candidates: int  # canaries of the run's kinds, members or not
    secret_control: dict | None  # the randomised VMR/AIR control (finetune.text.secret_control)
    users: dict[str, bool]  # user-level data: every user the attacker has samples of -> held in
    secret_arms: list[tuple[dict, bool]]  # (secret, trained) the memorization attacks may score
    #: user-level DP (finetune.dp.unit: user): the user of each of ``text``'s rows; None otherwise
    text_users: list | None = None
    #: finetune.user_canaries: each audit-user row's id -> its user (one unit under user-level DP); {} otherwise
    canary_units: dict[str, str] = field(default_factory=dict)

    @property
    def pool(self) -> list[Example]:
        """The Poisson-sampled examples."""
        return self.text + self.formatted + ([] if self.scheduled else self.canaries)

    @property
    def population(self) -> int:
        """What q and the default delta are computed from: the pool with every canary, member or not, in place of
        the members, so that neither depends on the membership draw the audit randomises."""
        return len(self.text) + len(self.formatted) + (0 if self.scheduled else self.candidates)

    def pool_users(self) -> list[str]:
        """User-level DP: the user of each ``pool`` example: a text row's user; an inserted secret-sharer canary's
        repetitions one user; each member canary its own user, except an audit user's rows: one user."""
        if self.text_users is None:
            raise ValueError("the run's text users were not gathered (gather_inputs with finetune.dp.unit: user)")
        formatted = [f"formatted:{k}" for k, r in enumerate(r for r in self.formatted_rows or [] if r["inserted"])
                     for _ in range(r["repetitions"])]
        canaries = [] if self.scheduled else [self.canary_units.get(i, f"canary:{k}:{i}")
                                              for k, i in zip(self.canary_kinds, self.canary_ids)]
        return [f"user:{u}" for u in self.text_users] + formatted + canaries

    @property
    def user_population(self) -> int:
        """User-level DP's candidate pool: the text rows' users and every canary user (held in or out), each
        inserted secret-sharer canary, and each canary of the run's kinds, member or not (one user each; an audit
        user's k rows one), so that q and the divisor do not depend on the membership draw the audit randomises."""
        users = set(self.text_users or ()) | set(self.canary_users)
        inserted = sum(1 for r in self.formatted_rows or [] if r["inserted"])
        units = self.candidates - len(self.canary_units) + len(set(self.canary_units.values()))
        return len(users) + inserted + (0 if self.scheduled else units)


def formatted_examples(rows: list[dict] | None, tok) -> list[Example]:
    """Inserted secret-sharer canaries, each repeated its number of times (whole sentence learned)."""
    out = []
    for r in rows or []:
        if r["inserted"]:
            e = make_example([bos_id(tok)], tok(r["text"], add_special_tokens=False)["input_ids"], "nwp", "formatted")
            out += [e] * r["repetitions"]
    return out


def attacker_users(where: Locations, dataset, cusers: dict[str, dict]) -> dict[str, bool]:
    """user -> held in, for every user of the attacker's samples (user-level datasets; else {})."""
    if not dataset.users:
        return {}
    rows = apply_canary_users(read_split(where.processed, dataset, "attacker"), cusers, dataset.user_columns)
    return {r["user"]: r["user_set"] == "held_in" for r in rows}


def run_secrets(where: Locations, spec, ft: FinetuneParams) -> list[dict] | None:
    """The secrets ``runs.<run>.secrets`` names (its dataset's, checked by the params): required with a randomised
    control; else None without a secrets file, or where the dataset has none (``NO_SECRETS``)."""
    if ft.secrets == NO_SECRETS or not (ft.secret_control.secrets or secrets_path(where.secrets, ft.secrets).is_file()):
        return None
    return read_secrets(where.secrets, ft.secrets)


def gather_inputs(ft: FinetuneParams, spec: DatasetSpec, where: Locations, canaries: dict[str, list[dict]],
                  tok) -> Inputs:
    """The run's inputs; ``spec`` is ``ft.dataset``'s spec, resolved by the caller from the params it read."""
    setup = TextSetup.of(ft)
    cusers = load_canary_users(where.canaries, spec.name) if spec.users else {}
    run_text = RunText(where.processed, spec, setup, cusers)
    secrets = run_secrets(where, spec, ft)
    pairs, control = run_text.training_pairs(secrets if ft.secret_control.secrets else None)
    text = text_examples(pairs, tok, setup.max_length, setup.objective)
    evals = run_text.examples(spec.eval_split, tok, ft.eval_rows, stream("finetune.eval_rows").int_seed(ft.seed))
    all_canaries = dict(canaries) if ft.canaries else {}
    units: dict[str, str] = {}
    if ft.user_canaries:  # the user-level audit's canary users: k rows each, one coin per user
        _, rows = read_audit_users(where.canaries) or (None, [])
        all_canaries[AUDIT_USERS_KIND] = rows
        units = {r["canary_id"]: f"{AUDIT_USERS_KIND}:{r['user']}" for r in rows}
    members = {k: [r for r in rows if r["member"]] for k, rows in all_canaries.items()}
    canary_ex = [e for k in members for e in canary_examples(members[k], ft.objective)]
    canary_ids = [r["canary_id"] for k in members for r in members[k]]
    canary_kinds = [k for k in members for _ in members[k]]
    formatted_rows = read_formatted(where.canaries) if ft.canaries else None
    formatted = formatted_examples(formatted_rows, tok)
    scheduled = canary_ex if ft.canary_insertion == "repetitions" else []
    candidates = sum(len(rows) for rows in all_canaries.values())
    users = run_text.training_users(secrets if ft.secret_control.secrets else None) if ft.dp.per_user else None
    return Inputs(text, pairs, run_text.heldout_pairs(len(pairs)), evals, members,
                  all_canaries, canary_ex, canary_ids, canary_kinds, formatted_rows, formatted, scheduled, cusers,
                  candidates, control, attacker_users(where, spec, cusers),
                  run_text.secret_arms(secrets, control), users, units)
