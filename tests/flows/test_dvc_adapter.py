"""What `leakaudit run` hands to DVC: only the stages `dvc status` found changed and everything downstream of them
(DVC then decides), and the per-stage time table it ends with."""
from flows.runtime.dvc_adapter import time_table, to_run

ORDER = ["base_model", "preprocess@a", "canaries", "finetune@x", "finetune@y", "attack@x", "attack@y", "audit",
         "report"]
UPSTREAM = {"base_model": set(), "preprocess@a": set(), "canaries": {"base_model", "preprocess@a"},
            "finetune@x": {"base_model", "preprocess@a", "canaries"},
            "finetune@y": {"base_model", "preprocess@a", "canaries"},
            "attack@x": {"base_model", "preprocess@a", "canaries", "finetune@x"},
            "attack@y": {"base_model", "preprocess@a", "canaries", "finetune@y"},
            "audit": set(ORDER[:7]), "report": set(ORDER[:8])}


def test_only_changed_stages_and_their_downstream_go_to_dvc():
    assert to_run(ORDER, UPSTREAM, set(), force=False) == []
    assert to_run(ORDER, UPSTREAM, {"finetune@y"}, force=False) == ["finetune@y", "attack@y", "audit", "report"]
    assert to_run(ORDER, UPSTREAM, {"report"}, force=False) == ["report"]
    assert to_run(ORDER, UPSTREAM, {"canaries"}, force=False) == ORDER[2:]
    assert to_run(ORDER, UPSTREAM, set(), force=True) == ORDER


def test_the_time_table_says_what_ran_and_what_was_cached():
    table = time_table([{"stage": "finetune@x", "ran": True, "seconds": 312.4},
                        {"stage": "attack@x", "ran": False, "seconds": 0.0}]).splitlines()
    assert table[0].split() == ["stage", "what", "seconds"]
    assert table[1].split() == ["finetune@x", "ran", "312.4"]
    assert table[2].split() == ["attack@x", "cached", "0.0"]
    assert table[3].split() == ["total", "1", "ran", "312.4"]
