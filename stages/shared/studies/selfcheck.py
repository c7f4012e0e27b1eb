"""The DP engine self-check's tables as records: reports/selfcheck.json (``SelfcheckReport``, written by ``leakaudit
selfcheck`` through stages/tools/selfcheck/verdict.py) and reports/selfcheck_mutants.json (``MutantsReport``, written
by benchmarks/selfcheck_mutants.py); the report reads both (``read_selfcheck``, ``read_mutants``)."""
from __future__ import annotations

from pathlib import Path

from ..core.errors import DataError
from ..core.io import read_json
from ..core.records import optional, read_record, record

#: the shape of reports/selfcheck.json; another is refused (regenerate it: ``leakaudit selfcheck``)
SELFCHECK_VERSION = 2


@record
class Test:
    """One test of the specification on one configuration: its p-value, the estimate and interval it reads (None
    where it has none) and its sample size."""

    p: float
    estimate: float | None
    interval: list[float] | None
    n: int
    note: str | None = optional()


@record
class SelfcheckRow:
    """One configuration: how it ran (clipping mode, paradigm, processes, the broken engine if any, seed, probe,
    regime), the one-run guesses, what the accountant booked, each test, the optimizer replay, the one-run bounds and
    the ideal, and the verdict (``broke``: what failed, in words)."""

    config: str
    mode: str
    paradigm: str
    processes: int
    mutant: str | None
    seed: int
    probe: str
    sample_rate: float
    steps: int
    optimizer: str
    resumed: bool
    canaries: int
    members: int
    guesses: int
    correct: int
    accountant_epsilon: float
    delta: float
    noise_multiplier: float
    divisor: float
    test_level: float
    tests: dict[str, Test]
    replay_error: float
    clip_ratio: float
    noise_scale: float | None
    noise_scale_interval: list[float] | None
    sensitivity: float | None
    eps_lb_95: float
    gdp_eps_lb_95: float
    gdp_eps_lb_strict: float
    gdp_mu_lb_strict: float
    mu: float
    ideal: float
    broke: list[str]
    flagged: bool


@record
class Power:
    """How often an engine whose noise is ``factor`` x the booked sigma is flagged by the noise test alone."""

    factor: float
    family: int
    test_level: float
    least_per_configuration: float
    family_flag_rate: float
    method: str


@record
class SelfcheckDesign:
    """selfcheck params as the run used them, the family the tests are corrected for, and the rules in words."""

    canaries: int
    transformer_canaries: int
    guesses_in: int
    guesses_out: int
    epsilon: float
    delta: float
    max_grad_norm: float
    accountant: str
    gradient_scale: float
    lr: float
    alpha: float
    rows_per_user: int
    seed: int
    family: int
    tests: list[str]
    test_level: float
    specification: str
    flag: str


@record
class SelfcheckReport:
    version: int
    power: dict[str, Power]  # noise_x0.9, noise_x0.95
    design: SelfcheckDesign
    checked: str
    not_checked: str
    all_pass: bool
    rows: list[SelfcheckRow]


def selfcheck_report(data: dict, where: str) -> SelfcheckReport:
    """The report of parsed JSON ``data``; another version is refused, naming the command that regenerates it."""
    if isinstance(data, dict) and data.get("version") != SELFCHECK_VERSION:
        raise DataError(f"{where}: version {data.get('version')!r}, not {SELFCHECK_VERSION} (regenerate it: "
                        "leakaudit selfcheck)")
    return read_record(SelfcheckReport, data, where)


def read_selfcheck(path: Path) -> SelfcheckReport:
    return selfcheck_report(read_json(path, "leakaudit selfcheck"), str(path))


@record
class MutantRow:
    """One broken engine (None: the correct one) on one configuration over ``seeds`` fresh seeds: how many were
    flagged and what the flags named; ``family`` and ``commit`` where the row was merged into an earlier table."""

    mutant: str | None
    config: str
    seeds: int
    first_seed: int
    flagged: int
    named: dict[str, int]
    seconds: int
    family: int | None = optional()
    commit: str | None = optional()


@record
class MutantsReport:
    family: int
    alpha: float
    tests: int
    rows: list[MutantRow]
    expected_pass_rows: list[MutantRow]


def read_mutants(path: Path) -> MutantsReport:
    return read_record(MutantsReport, read_json(path, "python benchmarks/selfcheck_mutants.py"), str(path))
