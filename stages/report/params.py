"""Params of ``report`` (the ``report`` section)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ReportParams:
    out_dir: str
    title: str
    #: the user-level comparison's table (flows/user_level.py writes it, git-tracked; the report shows it)
    user_level: str
    #: user inference with power (flows/user_inference.py writes it, git-tracked; the report shows it)
    user_inference: str
    #: the instruments' positive control (flows/positive_control.py writes it, git-tracked; the report shows it)
    positive_control: str
    #: its power follow-up (flows/positive_control.py --section positive_control_power, git-tracked)
    positive_control_power: str
