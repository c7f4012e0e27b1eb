"""The seed ledger (stages/audit/ledger.py): a seed set confirms exactly one design, the one its first recorded run
was under, and becomes a development set the moment it runs under another; the committed ledger says so of the
sets the project has run, and the audit reads a bound's status from it."""
import json

import pytest
from testkit.project import ROOT, project_raw

from stages.audit.ledger import Ledger, LedgerEntry, design_key, read_ledger, write_ledger
from stages.audit.params import SeedRegistry
from stages.shared.core.errors import DataError
from stages.shared.core.params import load
from stages.shared.core.seeds import DERIVATION

REGISTRY = SeedRegistry(development=(1, 2, 3), preregistered=(4, 5, 6, 7, 8, 9), ledger="l.json")


def _entry(seeds, design, streams=DERIVATION, recipe="r", before=True, v=130):
    return LedgerEntry(recipe=recipe, runs=(recipe,), seeds=tuple(seeds), design=design, streams=streams,
                       params_commit=f"c{len(seeds)}{design}", registered_before=before,
                       result={"m": 3000, "r": 150, "v": v, "eps_lb_95": 1.5}, source="test")


def test_a_set_confirms_only_the_design_of_its_first_run():
    ledger = Ledger((_entry([4, 5, 6], "A"), _entry([4, 5, 6], "B"), _entry([7, 8, 9], "B")))
    status = lambda seeds, design, streams=DERIVATION: ledger.status("r", seeds, design, streams,  # noqa: E731
                                                                     REGISTRY).value
    assert status([4, 5, 6], "A") == "confirmation"  # its first run
    assert status([4, 5, 6], "B") == "development"  # run again under another design: a look from then on
    assert status([7, 8, 9], "B") == "confirmation"
    assert status([4, 5, 6], "A", "other streams") == "development"  # streams are part of the design
    assert status([4, 8], "B") == "development"  # a set overlapping one that ran before
    assert status([7], "B") == "confirmation"  # one run of a confirmation set: its first run is the set's
    assert status([1, 4], "Z") == "development"  # a development seed, whatever the ledger says


def test_seeds_the_ledger_never_saw_are_confirmation_only_when_preregistered():
    ledger = Ledger((_entry([4, 5, 6], "A", recipe="other"),))  # another recipe's runs do not count
    assert ledger.status("r", [4, 5, 6], "B", DERIVATION, REGISTRY).value == "confirmation"
    assert ledger.status("r", [4, 42], "B", DERIVATION, REGISTRY).value == "development"
    late = Ledger((_entry([7, 8, 9], "B", before=False),))  # seeds committed only after their first run
    assert late.status("r", [7, 8, 9], "B", DERIVATION, REGISTRY).value == "development"


def test_the_ledger_round_trips_and_refuses_what_it_cannot_read(tmp_path):
    path = tmp_path / "ledger.json"
    assert read_ledger(path).entries == ()  # nothing recorded yet
    ledger = Ledger((_entry([4, 5, 6], "A"),)).appended(_entry([7, 8, 9], "B"))
    write_ledger(path, ledger)
    assert read_ledger(path) == ledger and not list(tmp_path.glob(".*.tmp"))
    data = json.loads(path.read_text())
    data["entries"][0]["unexpected"] = 1
    path.write_text(json.dumps(data))
    with pytest.raises(DataError, match="unknown entry keys"):
        read_ledger(path)
    path.write_text(json.dumps({"version": 0, "entries": []}))
    with pytest.raises(DataError, match="ledger version 0"):
        read_ledger(path)


def test_the_design_key_leaves_seeds_out_and_sees_the_recipe():
    raw = project_raw()
    key = design_key(raw, "dp_eps8")
    moved = json.loads(json.dumps(raw))
    moved["canaries"]["seed"] = moved["finetune"]["seed"] = 7001
    assert design_key(moved, "dp_eps8") == key
    moved["runs"]["dp_eps8"]["lr"] = 0.123
    assert design_key(moved, "dp_eps8") != key
    # user-level DP keys added later change nothing while the unit is the example: the same design
    dp = moved["finetune"]["dp"]
    moved["runs"]["dp_eps8"]["lr"] = raw["runs"]["dp_eps8"].get("lr")
    for present in (True, False):
        dp.pop("unit", None), dp.pop("rows_per_user", None)
        if present:
            dp.update(unit="example", rows_per_user=7)
        assert design_key(moved, "dp_eps8") == key
    dp["unit"] = "user"
    assert design_key(moved, "dp_eps8") != key
    dp["unit"] = "example"
    run = moved["runs"]["dp_eps8"]
    run["dataset"] = moved["finetune"]["dataset"]  # naming the dataset it trains on anyway: the same design
    assert design_key(moved, "dp_eps8") == key
    run["dataset"] = "tofu"
    assert design_key(moved, "dp_eps8") != key


def test_the_committed_ledger_says_what_each_seed_set_is():
    raw = project_raw()
    registry = load(SeedRegistry, "audit.seeds", ROOT / "params.yaml", raw)
    ledger = read_ledger(ROOT / registry.ledger)
    design = design_key(raw, "dp_eps8")
    runs = ledger.runs_of("dp_eps8", [3104])
    assert len(runs) >= 3 and runs[0].design != design  # 3104-3106: first run under an earlier design
    assert ledger.status("dp_eps8", [3104, 3105, 3106], design, DERIVATION, registry).value == "development"
    assert ledger.status("dp_eps8", [3111, 3112, 3113], design, DERIVATION, registry).value == "confirmation"
    assert ledger.status("dp_eps8", [3101, 3102, 3103], design, DERIVATION, registry).value == "development"
    # the default run's pooled set is a clean confirmation of the design params.yaml holds now
    seeds = [raw["canaries"]["seed"]] + [s["seed"] for s in raw["replicas"]["sets"].values() if s["run"] == "dp_eps8"]
    assert ledger.status("dp_eps8", seeds, design, DERIVATION, registry).value == "confirmation"


def test_the_audit_users_keys_leave_an_example_level_recipes_design_as_it_was():
    """canaries.audit_users and finetune.user_canaries: false change nothing for a run without audit users, so its
    design key (and its seed set's status) is the one it had before they existed; a run with them has another."""
    import copy

    from testkit.project import project_raw

    from stages.audit.ledger import design_key

    raw = project_raw()
    before = copy.deepcopy(raw)
    del before["canaries"]["audit_users"], before["finetune"]["user_canaries"]
    assert design_key(raw, "dp_eps8") == design_key(before, "dp_eps8")
    with_users = copy.deepcopy(raw)
    with_users["runs"]["dp_eps8"]["user_canaries"] = True
    assert design_key(with_users, "dp_eps8") != design_key(raw, "dp_eps8")
    changed = copy.deepcopy(with_users)
    changed["canaries"]["audit_users"]["rows"] = 8
    assert design_key(changed, "dp_eps8") != design_key(with_users, "dp_eps8")


def test_canary_users_documents_at_all_leave_a_recipes_design_as_it_was():
    """canaries.users.documents [null] (every document, as before the key existed) reads as its absence in a design;
    a cap on the documents is another design."""
    import copy

    from testkit.project import project_raw

    from stages.audit.ledger import design_key

    raw = project_raw()
    assert raw["canaries"]["users"]["documents"] == [None]
    before = copy.deepcopy(raw)
    del before["canaries"]["users"]["documents"]
    assert design_key(raw, "dp_eps8") == design_key(before, "dp_eps8")
    capped = copy.deepcopy(raw)
    capped["canaries"]["users"]["documents"] = [1, None]
    assert design_key(capped, "dp_eps8") != design_key(raw, "dp_eps8")
