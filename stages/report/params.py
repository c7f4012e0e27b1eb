"""Params of ``report`` (the ``report`` section)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ReportParams:
    out_dir: str
    title: str
