"""The README and docs/ agree with params.yaml and with themselves: the README stays short, every number it (and the
docs pages the rest moved to) quotes from params.yaml is the value there, every relative link resolves, the
README's yaml blocks load and pass the whole-file params check, and CI runs the README's test commands."""
import math
import re
import shlex
import textwrap

import pytest
import yaml
from testkit.project import ROOT

from stages.shared.core.params import read_params

README = ROOT / "README.md"
DOCS = ROOT / "docs"
SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")
FRACTIONS = {0.5: "½"}


def _flat(text: str) -> str:
    """Whitespace collapsed, so a phrase may wrap across lines."""
    return " ".join(text.split())


def _params() -> dict:
    # only the sections that stay in params.yaml: model, preprocess, canaries, finetune, runs, attack, audit
    return read_params(ROOT / "params.yaml")


def _run(p: dict, name: str) -> dict:
    """``runs.<name>`` deep-merged over ``finetune``, as the pipeline resolves a run."""
    from stages.shared.core.params import deep_merge

    return deep_merge(p["finetune"], p["runs"][name] or {})


def _power_of_ten(x: float) -> str:
    e = round(math.log10(x))
    assert math.isclose(10.0 ** e, x), f"{x} is not a power of ten: write its phrase by hand"
    return f"10{str(e).translate(SUPERSCRIPT)}"


def _q(p: dict, run: dict) -> str:
    """q as params.yaml's comments count it: batch size over the candidate pool (text rows + formatted canary
    insertions + every canary, member or not), two significant digits as the docs write it."""
    f = p["canaries"]["formatted"]
    inserted = int(round(f["candidates"] * f["inserted_fraction"]))
    formatted = len(f["formats"]) * f["repetition_step"] * inserted * (inserted + 1) // 2
    pool = run["max_text_rows"] + formatted + p["canaries"]["num_canaries"]
    return f"{run['batch_size'] / pool:.2g}"


def _phrases() -> list[tuple[str, str]]:
    """(file, phrase): each phrase built from params.yaml's value, as the file words it."""
    p = _params()
    m = p["canaries"]["num_canaries"]
    nondp, dp = _run(p, "nondp"), _run(p, "dp_eps8")
    dp_eps = f"({dp['dp']['epsilon']:g}, {_power_of_ten(dp['dp']['delta'])})-DP-SGD"
    primary = p["audit"]["primary"]
    gpu = p["audit"]["ceiling"]["planned"]["gpu_dp_audit"]
    tofu_users = p["preprocess"]["datasets"]["tofu_authors"]["user_level"]["max_users"]
    conf = " / ".join(f"{round(100 * c)} %" for c in primary["confidences"])
    assert p["finetune"]["seed"] == p["canaries"]["seed"]  # the docs speak of one default seed
    return [
        ("README.md", f"m = {m} new-token canaries (seed {p['canaries']['seed']})"),
        ("README.md", f"`nondp` (AdamW, {nondp['steps']} steps at q = {_q(p, nondp)})"),
        ("README.md", f"`dp_eps8` ({dp_eps}, {dp['steps']} steps at q = {_q(p, dp)})"),
        ("README.md", f"ε̂ ({conf})"),
        ("README.md", f"(audit.primary.attack: {primary['attack']})"),
        ("README.md", f"({primary['no_dp']['k_pos']} \"in\" guesses"),
        ("docs/running.md", f"each with {m} new-token canaries"),
        ("docs/running.md", f"`nondp` (AdamW, {nondp['steps']} steps at q = {_q(p, nondp)})"),
        ("docs/running.md", f"of a seeded {tofu_users})"),
        ("docs/running.md", f"`dp_eps8` ({dp_eps}, {dp['steps']} steps at q = {_q(p, dp)},"),
        ("docs/running.md", f"The default runs draw from seed {p['finetune']['seed']}"),
        ("docs/running.md", f"T = {gpu['steps']}, q = {gpu['sample_rate']:g}, ({gpu['epsilon']:g}, "
                            f"{_power_of_ten(gpu['delta'])})-DP, m = {gpu['canaries']} per kind"),
        ("docs/architecture.md", f"m = {m} new-token canaries (other kinds by params), each a member w.p. "
                                 f"{FRACTIONS[p['canaries']['member_prob']]}"),
    ]


def test_the_readme_is_at_most_200_lines():
    assert len(README.read_text().splitlines()) <= 200


@pytest.mark.parametrize(("file", "phrase"), _phrases(), ids=lambda x: x[:40])
def test_numbers_quoted_from_params_are_params_values(file, phrase):
    assert phrase in _flat((ROOT / file).read_text()), f"{file} no longer says {phrase!r}: update it to params.yaml"


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped (hyphens kept), spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", "")).replace(" ", "-")


@pytest.mark.parametrize("page", ["README.md", *sorted(f"docs/{f.name}" for f in DOCS.glob("*.md"))])
def test_every_relative_link_resolves(page):
    """Markdown links that are not URLs point at an existing file, and an anchor at one of its headings."""
    src = ROOT / page
    links = re.findall(r"\]\(([^)\s]+)\)", src.read_text())
    assert page != "README.md" or any(link.startswith("docs/") for link in links)
    for link in links:
        if re.match(r"[a-z]+:", link):
            continue
        path, _, anchor = link.partition("#")
        target = (src.parent / path).resolve() if path else src
        assert target.is_file(), f"{page}: {link} does not resolve"
        if anchor and target.suffix == ".md":
            slugs = {_slug(h) for h in re.findall(r"^#+ (.+)$", target.read_text(), re.M)}
            assert anchor in slugs, f"{page}: {link}: no such heading"


def _yaml_block(heading: str) -> dict:
    text = README.read_text()
    assert text.count(f"\n{heading}\n") == 1
    section = text.split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```yaml\n(.*?)```", section, re.S)  # one yaml block a section, for tests to extract
    return yaml.safe_load(textwrap.dedent(block))


def test_the_readmes_own_text_block_names_what_the_audit_rule_needs():
    """Merged into params.yaml, the own-data block passes the whole-file check, and every run of it lists the attack
    the pre-registered rule reads (a run whose list lacks it trains and then stops at the audit)."""
    from stages.params import validate_params
    from stages.shared.core.params import deep_merge

    block = _yaml_block("## Audit your own private text")
    raw = deep_merge(_params(), block)
    validate_params(raw, "README.md")
    attack = raw["audit"]["primary"]["attack"]
    for run in block["runs"]:
        listed = block["attack"]["runs"][run]
        assert attack in (raw["attack"]["attacks"] if listed is None else listed), run


def test_the_readmes_trained_elsewhere_block_is_valid_params():
    from stages.params import validate_params
    from stages.shared.core.params import deep_merge

    block = _yaml_block("## Audit your own fine-tune (trained elsewhere)")
    assert set(block["attack"]["runs"]) == set(block["runs"])  # every run names its attacks
    validate_params(deep_merge(_params(), block), "README.md")


def _pytest_commands(text: str) -> list[tuple[set, list]]:
    """(environment variables, pytest arguments) of each `python -m pytest` line, `-q` dropped."""
    out = []
    for line in text.splitlines():
        if "python -m pytest" not in line:
            continue
        words = [w for w in shlex.split(line.split("#", 1)[0]) if w != "env"]
        i = words.index("pytest")
        env = {w.split("=", 1)[0] for w in words[:i] if "=" in w}
        out.append((env, [w for w in words[i + 1:] if w != "-q"]))
    return out


def test_ci_runs_the_readmes_test_commands():
    quick = README.read_text().split("## Quick start", 1)[1].split("\n## ", 1)[0]
    readme, ci = _pytest_commands(quick), _pytest_commands((ROOT / ".ci/run").read_text())
    assert len(readme) == 2 and "bash setup.sh" in quick and "bash setup.sh" in (ROOT / ".ci/run").read_text()
    for env, args in readme:
        assert any(args == a and env <= e for e, a in ci), f"CI does not run the README's pytest {args}"
