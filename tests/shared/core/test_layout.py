"""The layout's promises, checked from the code itself.

* a stage's code ``deps:`` in dvc.yaml are exactly the files its command imports (lazy imports inside functions
  included; ``flows/runtime/deps.py``), so a code change reruns exactly the stages it touches;
* a stage package imports only the shared packages, its own modules and upstream public schema modules;
* a flow, and the ``leakaudit`` command line, import only the public surface of the stages
  (``flow_internal_imports``); the arrow goes CLI -> flows -> stages: no flow imports the CLI (``flows_importing_cli``);
* no module imports itself through others (``import_cycles``), lazy imports inside functions included;
* no function is longer than ~60 lines unless its docstring says why;
* importing any module changes no process state (environment, warning filters, torch's RNG).
"""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from testkit.project import ROOT

from flows.runtime.deps import (
    CODE_MARK,
    closure_files,
    deps_blocks,
    differences,
    discovered,
    import_statements,
    imported_modules,
    listed,
    module_file,
    sources,
    write,
)

#: the project's packages: the stages, the flows over them and the ``leakaudit`` command line over both
PACKAGES = ("stages", "flows", "leakaudit")
#: what each shared package may import (besides itself); stage packages may import all of them
SHARED = {"core": set(), "lm": {"core"}, "datasets": {"core"}, "bounds": {"core"}, "studies": {"core"}}
MAX_LINES = 60
#: modules at the package root: stages/params.py is the root of params.yaml and imports every stage's params
#: module; no stage imports it (a stage loading it would have every params module in its DVC deps)
ROOT_MODULES = {"__init__.py", "params.py"}


def dvc_stages(root: Path = ROOT) -> dict[str, tuple[str, list[str]]]:
    """stage address -> (cmd, dep paths as written), foreach stages expanded, read through DVC itself."""
    from dvc.repo import Repo

    with Repo(str(root)) as repo:
        return {s.name: (s.cmd, [d.def_path for d in s.deps]) for s in repo.index.stages}


def code_deps(root: Path = ROOT) -> dict[str, tuple[set[str], set[str]]]:
    """stage address (as DVC expands it) -> (the project files its command imports, the files its code deps name)."""
    out = {}
    for name, (cmd, deps) in dvc_stages(root).items():
        want = closure_files(cmd, root)
        got = set().union(*(sources(d, root) for d in deps if d == "stages" or d.startswith("stages/")))
        out[name] = (want, got)
    return out


def import_edges(path: Path, root: Path = ROOT) -> set[Path]:
    """The project files ``path`` imports directly: ``from p import x`` is an edge to module p.x where x is a module,
    else to p; a package's parents' ``__init__`` are not edges (Python runs them first, then this package is already
    loading, which is not a cycle)."""
    names = set(discovered(path, root))
    for target, imported in import_statements(path, root):
        for name in imported or [None]:
            names.add(f"{target}.{name}" if name and module_file(f"{target}.{name}", root) else target)
    files = {module_file(n, root) for n in names}
    return {f for f in files if f is not None and f != path}


def import_cycles(root: Path = ROOT) -> list[list[str]]:
    """Every strongly connected set of more than one project module (stages/, flows/, leakaudit/) in the import
    graph, lazy imports inside functions included: each is an import cycle."""
    files = sorted(p for d in PACKAGES if (root / d).is_dir() for p in (root / d).rglob("*.py"))
    graph = {f: sorted(import_edges(f, root)) for f in files}
    index: dict[Path, int] = {}
    low: dict[Path, int] = {}
    stack: list[Path] = []
    on_stack: set[Path] = set()
    cycles: list[list[str]] = []

    def visit(v: Path) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(str(w.relative_to(root)))
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for f in files:
        if f not in index:
            visit(f)
    return sorted(cycles)


def test_no_import_cycles():
    assert import_cycles() == []


def test_a_planted_import_cycle_is_caught(tmp_path):
    """The check can fail: a cycle hidden behind an import inside a function is named, module by module, in a tiny
    tree and in a copy of the real one (the sampler importing the loop that imports it, as loop <-> diagnostics
    once did); ``from . import x`` of a package's own modules is not a cycle."""
    import shutil

    pkg = tmp_path / "tiny" / "stages" / "pkg"
    pkg.mkdir(parents=True)
    (pkg.parent / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("from . import a\n")
    (pkg / "a.py").write_text("from .b import x\n")
    (pkg / "b.py").write_text("x = 1\n")
    assert import_cycles(tmp_path / "tiny") == []
    (pkg / "b.py").write_text("x = 1\n\n\ndef f():\n    from .a import x\n    return x\n")
    assert import_cycles(tmp_path / "tiny") == [["stages/pkg/a.py", "stages/pkg/b.py"]]

    shutil.copytree(ROOT / "stages", tmp_path / "real" / "stages", ignore=shutil.ignore_patterns("__pycache__"))
    sampling = tmp_path / "real" / "stages" / "finetune" / "sampling.py"
    sampling.write_text(sampling.read_text() + "\n\ndef planted():\n    from .loop import train\n    return train\n")
    cycles = import_cycles(tmp_path / "real")
    assert len(cycles) == 1 and {"stages/finetune/loop.py", "stages/finetune/sampling.py"} <= set(cycles[0])


def test_every_stage_runs_as_a_package_with_a_main():
    for name, (cmd, _) in dvc_stages().items():
        module = re.match(r"python -m (stages\.\w+)", cmd).group(1)
        assert (ROOT / module.replace(".", "/") / "__main__.py").is_file(), name


def test_dvc_code_deps_are_exactly_each_stage_import_closure():
    """Nothing missing (an edit would not rerun the stage) and nothing extra (an edit would rerun it for nothing), for
    every stage as DVC itself expands dvc.yaml; `python -m flows.runtime.deps --write` regenerates the lists."""
    bad = {name: {"missing": sorted(want - got), "extra": sorted(got - want)}
           for name, (want, got) in code_deps().items() if want != got}
    assert bad == {}
    assert differences() == {}


def test_dvc_yaml_reads_data_before_code_in_under_450_lines():
    """A person can scan dvc.yaml: each stage's outs, then its data deps (one per line), come before its code deps
    (after the ``# code:`` line, wrapped), and the whole file stays under 450 lines."""
    lines = (ROOT / "dvc.yaml").read_text().splitlines()
    assert len(lines) < 450
    blocks = dict(deps_blocks(lines))
    assert set(blocks) == set(listed()) and all(listed().values())
    for stage, (first, end) in blocks.items():
        start = max(k for k in range(first) if lines[k] == f"  {stage}:")
        assert any(line.strip() == "outs:" for line in lines[start:first]), stage
        (mark,) = [k for k in range(first, end) if lines[k].strip() == CODE_MARK]
        code = [d.strip().rstrip("]") for line in lines[mark + 1:end] for d in line.split(",") if d.strip()]
        assert code == listed()[stage], stage  # nothing but the code deps after the mark


def test_the_variance_stage_runs_no_module_of_the_audit_stage():
    """The audit maths is shared code (stages/shared/bounds/): the variance stage's closure holds none of the audit
    stage's
    modules, so editing the audit stage reruns the audit, not the variance analysis."""
    closure = closure_files("python -m stages.variance", ROOT)
    assert any(f.startswith("stages/shared/bounds/") for f in closure)
    assert [f for f in closure if f.startswith("stages/audit/")] == []


def test_a_missing_or_extra_dep_is_caught(tmp_path):
    """The check above can fail both ways: drop one code dep from a copy of dvc.yaml, or add one the stage does not
    import, and it names the stage and file; --write restores the equality."""
    import shutil

    for item in ("stages", "dvc.yaml", "params.yaml", "studies.yaml", ".dvcignore"):
        src = ROOT / item
        (shutil.copytree(src, tmp_path / item, ignore=shutil.ignore_patterns("__pycache__")) if src.is_dir()
         else shutil.copy2(src, tmp_path / item))
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["dvc", "init", "-q"], cwd=tmp_path, check=True)
    dvc_yaml = tmp_path / "dvc.yaml"
    text = dvc_yaml.read_text()
    dropped = " stages/attack/schema.py,"  # the audit stage reads the attack's schema module
    at = text.index("\n  audit:\n")
    assert dropped in text[at:]
    dvc_yaml.write_text(text[:at] + text[at:].replace(dropped, " stages/report/render.py,", 1))
    got = code_deps(tmp_path)["audit"]
    assert got[0] - got[1] == {"stages/attack/schema.py"} and got[1] - got[0] == {"stages/report/render.py"}
    assert differences(tmp_path) == {"audit": {"missing": ["stages/attack/schema.py"],
                                               "extra": ["stages/report/render.py"]}}
    write(tmp_path)
    assert differences(tmp_path) == {} and dvc_yaml.read_text() == text


#: the tools beside the pipeline (stages/tools/), packages without a ``__main__`` that no DVC stage runs: the DP engine
#: self-check (``leakaudit selfcheck``), a run's export and release (``leakaudit export-canaries``, ``leakaudit
#: release``) and the flows' studies over several experiments (the design study's rows, the sweep's tables). A tool may
#: import any stage module; no stage package nor shared package imports a tool, so no stage's deps hold one and editing
#: a tool reruns no stage
TOOL_PACKAGES = {"selfcheck", "handoff", "studies"}
#: the DVC stages (stages/<stage>/, each with a ``__main__``: dvc.yaml runs ``python -m stages.<stage>``)
STAGE_PACKAGES = ["attack", "audit", "base_model", "canaries", "data_docs", "finetune", "preprocess", "reference",
                  "report", "secrets", "variance"]


def home(parts: list[str] | tuple[str, ...]) -> tuple[str, str]:
    """(kind, package) of a module path under stages/ (its parts after ``stages``): ("shared", p) under
    stages/shared/, ("tools", p) under stages/tools/, else ("stage", p), a root module's kind "root"."""
    if parts[0] in ("shared", "tools") and len(parts) > 1:
        return parts[0], parts[1]
    return ("root", parts[0]) if parts[0] in ("params", "__init__") else ("stage", parts[0])


def packages_under(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir() if (p / "__init__.py").is_file()}


def test_stages_shared_libraries_and_tools_each_live_in_their_own_home():
    """stages/ holds the DVC stages (each a package with a ``__main__``), stages/shared/ the shared libraries and
    stages/tools/ the tools (neither with a ``__main__``), and nothing else but the root modules."""
    stages = ROOT / "stages"
    assert sorted(packages_under(stages) - {"shared", "tools"}) == STAGE_PACKAGES
    assert all((stages / p / "__main__.py").is_file() for p in STAGE_PACKAGES)
    assert packages_under(stages / "shared") == set(SHARED) and packages_under(stages / "tools") == TOOL_PACKAGES
    assert not [*(stages / "shared").rglob("__main__.py"), *(stages / "tools").rglob("__main__.py")]
    assert {p.name for p in stages.glob("*.py")} == ROOT_MODULES


def test_stage_packages_import_only_shared_code_and_upstream_schemas(tmp_path):
    """A stage imports only shared code, its own modules and upstream stages' public modules, shared code only the
    shared code it may, and neither a tool. The check can fail: a copy of the tree whose audit stage imports a tool's
    params (lazily) is named."""
    import shutil

    def problems(root: Path) -> list[str]:
        out = []
        for path in sorted((root / "stages").rglob("*.py")):
            kind, owner = home(path.relative_to(root / "stages").with_suffix("").parts)
            if kind in ("root", "tools"):
                continue  # the root params reads every section; a tool may import any stage module
            for mod in sorted(imported_modules(path, root)):
                parts = mod.split(".")
                if parts[0] != "stages" or len(parts) < 2 or home(parts[1:]) in ((kind, owner), ("root", "__init__")):
                    continue
                target_kind, target = home(parts[1:])
                if target_kind == "tools":
                    ok = False  # no stage nor shared package imports a tool, not even its params
                elif kind == "shared":
                    ok = target_kind == "shared" and target in SHARED[owner]
                else:  # shared code, or an upstream stage's public surface: its schema, params or api module
                    ok = target_kind == "shared" or parts[2:3] in (["schema"], ["params"], ["api"])
                if not ok:
                    out.append(f"{path.relative_to(root)} imports {mod}")
        return out

    assert problems(ROOT) == []
    shutil.copytree(ROOT / "stages", tmp_path / "stages", ignore=shutil.ignore_patterns("__pycache__"))
    planted = tmp_path / "stages" / "audit" / "run.py"
    planted.write_text(planted.read_text() + "\n\ndef planted():\n"
                       "    from stages.tools.selfcheck.params import SelfcheckParams\n    return SelfcheckParams\n")
    assert problems(tmp_path) == ["stages/audit/run.py imports stages.tools.selfcheck.params",
                                  "stages/audit/run.py imports stages.tools.selfcheck.params.SelfcheckParams"]


#: the public surface of the stages for the flows: the shared packages, the root params and the tools (any module of
#: them), a stage's package itself, and its ``schema`` (contract), ``params`` (its section) and ``api`` (the
#: functions flows call) modules; every other module of a stage is internal to it
PUBLIC_PACKAGES = {"shared", "tools", "params"}
PUBLIC_MODULES = {"schema", "params", "api"}


def flow_internal_imports(root: Path = ROOT) -> list[str]:
    """Every import in flows/ or leakaudit/ (the command line) of a stage module outside the public surface (lazy
    imports inside functions included)."""
    problems = []
    for path in sorted(p for d in ("flows", "leakaudit") if (root / d).is_dir() for p in (root / d).rglob("*.py")):
        for mod in sorted(imported_modules(path, root)):
            parts = mod.split(".")
            if parts[0] != "stages" or len(parts) < 3 or parts[1] in PUBLIC_PACKAGES:
                continue  # not a stage module, a stage's package, or shared code
            if module_file(".".join(parts[:2]), root) is None or parts[2] in PUBLIC_MODULES:
                continue  # `from stages import x` names no stage module; a public module (or a name it exports)
            if module_file(".".join(parts[:3]), root) is None:
                continue  # `from stages.<stage> import name`: a name the package's __init__ exports
            problems.append(f"{path.relative_to(root)} imports {mod}")
    return problems


def flows_importing_cli(root: Path = ROOT) -> list[str]:
    """Every import of the ``leakaudit`` command line from flows/ or stages/ (lazy imports included): the CLI starts
    flows and calls stages, never the reverse."""
    return [f"{path.relative_to(root)} imports {mod}"
            for d in ("stages", "flows") if (root / d).is_dir() for path in sorted((root / d).rglob("*.py"))
            for mod in sorted(imported_modules(path, root)) if mod.split(".")[0] == "leakaudit"]


def test_flows_import_only_the_public_surface_of_the_stages():
    assert flow_internal_imports() == []


def test_the_arrow_goes_cli_to_flows_to_stages():
    """No flow nor stage imports the command line."""
    assert flows_importing_cli() == []


def test_a_flow_importing_the_cli_is_caught(tmp_path):
    """The check above can fail: a lazy import of the CLI in a copy's flow is named."""
    (tmp_path / "flows").mkdir()
    (tmp_path / "flows" / "bad.py").write_text("def f():\n    from leakaudit.settings import x\n    return x\n")
    (tmp_path / "flows" / "good.py").write_text("from flows.bad import f\n")
    assert flows_importing_cli(tmp_path) == ["flows/bad.py imports leakaudit.settings",
                                             "flows/bad.py imports leakaudit.settings.x"]


def test_a_flow_importing_a_stage_internal_is_caught(tmp_path):
    """The check above can fail: a copy of the tree whose flow imports a stage internal (eagerly, lazily or as a
    submodule of the package) is named, and the public forms are not, nor any module of a tool."""
    import shutil

    shutil.copytree(ROOT / "stages", tmp_path / "stages", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "flows").mkdir()
    (tmp_path / "flows" / "bad.py").write_text(
        "from stages.audit.pooled import design_look\nfrom stages.finetune import sealed\n"
        "def f():\n    import stages.base_model.convert\n")
    (tmp_path / "flows" / "good.py").write_text(
        "from stages.audit.api import design_look\nfrom stages.audit.schema import confidence_key\n"
        "from stages.shared.core.formatting import fmt\nfrom stages.params import load_params\n"
        "from stages.shared.datasets import get_dataset\nfrom stages.finetune.params import load_finetune\n"
        "from stages.tools.studies.study import study_rows\nfrom stages.tools.selfcheck import verdict\n"
        "def g():\n    import stages.tools.handoff.export\n")
    (tmp_path / "leakaudit").mkdir()
    (tmp_path / "leakaudit" / "cli.py").write_text("def h():\n    from stages.audit.run import main\n")
    assert flow_internal_imports(tmp_path) == [
        "flows/bad.py imports stages.audit.pooled", "flows/bad.py imports stages.audit.pooled.design_look",
        "flows/bad.py imports stages.base_model.convert", "flows/bad.py imports stages.finetune.sealed",
        "leakaudit/cli.py imports stages.audit.run", "leakaudit/cli.py imports stages.audit.run.main"]


def _functions(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


#: the code the size rules cover (tests are not held to them: a test reads top to bottom)
CODE = (*PACKAGES, "benchmarks")
MAX_FILE_LINES = 400


def _code_files(root: Path = ROOT) -> list[Path]:
    return sorted(p for d in CODE for p in (root / d).rglob("*.py"))


def long_functions(root: Path = ROOT) -> list[str]:
    """Functions over MAX_LINES lines whose docstring does not say "Long because"."""
    long = []
    for path in _code_files(root):
        for fn in _functions(path):
            lines = fn.end_lineno - fn.lineno + 1
            if lines > MAX_LINES and "Long because" not in (ast.get_docstring(fn) or ""):
                long.append(f"{path.relative_to(root)}:{fn.lineno} {fn.name} ({lines} lines)")
    return long


def long_files(root: Path = ROOT) -> list[str]:
    """Files over MAX_FILE_LINES lines whose module docstring does not say "Long because"."""
    out = []
    for path in _code_files(root):
        text = path.read_text()
        lines = text.count("\n")
        if lines > MAX_FILE_LINES and "Long because" not in (ast.get_docstring(ast.parse(text)) or ""):
            out.append(f"{path.relative_to(root)} ({lines} lines)")
    return out


def test_no_function_over_60_lines_and_no_file_over_400_without_a_stated_reason():
    assert long_functions() == [] and long_files() == []


def test_a_long_function_or_file_is_caught(tmp_path):
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_LINES))
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "b.py").write_text(f"def f():\n{body}\n\ndef g():\n"
                                                  f"    \"\"\"Long because: a table.\"\"\"\n{body}")
    (tmp_path / "flows").mkdir()
    (tmp_path / "flows" / "big.py").write_text("x = 1\n" * (MAX_FILE_LINES + 1))
    (tmp_path / "flows" / "ok.py").write_text('"""Long because: generated."""\n' + "x = 1\n" * (MAX_FILE_LINES + 1))
    (tmp_path / "stages").mkdir()
    assert long_functions(tmp_path) == [f"benchmarks/b.py:1 f ({MAX_LINES + 1} lines)"]
    assert long_files(tmp_path) == [f"flows/big.py ({MAX_FILE_LINES + 1} lines)"]


PROBE = """
import importlib, os, pkgutil, sys, warnings, torch
ours = tuple(os.path.join(os.getcwd(), d) for d in ("stages", "flows", "leakaudit"))
calls = []
def spy(fn):  # record calls made from our own code (third-party imports may set filters of their own)
    def wrapper(*a, **k):
        caller = sys._getframe(1).f_code.co_filename
        if caller.startswith(ours):
            calls.append(f"{fn.__name__} from {os.path.relpath(caller)}")
        return fn(*a, **k)
    return wrapper
warnings.filterwarnings, warnings.simplefilter = spy(warnings.filterwarnings), spy(warnings.simplefilter)
torch.manual_seed, torch.random.manual_seed = spy(torch.manual_seed), spy(torch.random.manual_seed)
env, rng = dict(os.environ), torch.get_rng_state()
names = []
for root in ("stages", "flows", "leakaudit"):
    pkg = importlib.import_module(root)
    names += [m.name for m in pkgutil.walk_packages(pkg.__path__, root + ".")]
for name in names:
    importlib.import_module(name)
changed = sorted(k for k in set(env) | set(os.environ) if env.get(k) != os.environ.get(k))
print(len(names), changed, calls, bool((torch.get_rng_state() == rng).all()))
"""


@pytest.mark.slow
def test_importing_any_module_changes_no_process_state():
    env = {k: v for k, v in __import__("os").environ.items()
           if not k.startswith(("PREFECT_", "GX_", "DVC_", "HF_", "TOKENIZERS_", "DO_NOT_TRACK"))}
    proc = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = proc.stdout.strip().splitlines()[-1]  # "<modules> <env keys changed> <our filter/seed calls> <rng same>"
    assert line.endswith(" [] [] True"), line
    assert int(line.split()[0]) > 60


#: a record's field read back out of a sentence or a prefix: roles, optimizers and statuses are compared as values
SENTENCE_TESTS = re.compile(r'startswith\("secondary|"DP-"')


def test_no_code_reads_a_role_or_optimizer_out_of_a_string():
    hits = [f"{path.relative_to(ROOT)}:{i}" for top in ("stages", "flows", "leakaudit")
            for path in sorted((ROOT / top).rglob("*.py"))
            for i, line in enumerate(path.read_text().splitlines(), 1) if SENTENCE_TESTS.search(line)]
    assert hits == []


def test_benchmarks_reach_the_testkit_and_the_stages_without_sys_path(tmp_path):
    """The test-support package is installed with the project (tests/testkit): a benchmark imports it, and the stages,
    from any directory without touching sys.path or PYTHONPATH."""
    touching = [p.name for p in sorted((ROOT / "benchmarks").glob("*.py")) if "sys.path" in p.read_text()]
    assert touching == []
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    probe = "import testkit.project, testkit.mutants, stages; print(testkit.project.ROOT)"
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert out.returncode == 0 and Path(out.stdout.strip()) == ROOT, out.stderr[-2000:]


def test_flows_holds_flows_and_its_runtime_the_helpers():
    """Each module directly under flows/ is a flow: a Prefect ``@flow`` or a study's entry point run as ``python -m
    flows.<name>``; what they run on (the API server, the DVC adapter, experiments, the deps lists) is flows/runtime/,
    which defines no flow."""
    top = sorted(p for p in (ROOT / "flows").glob("*.py") if p.name != "__init__.py")
    assert top and all("@flow" in p.read_text() or 'if __name__ == "__main__":' in p.read_text() for p in top), top
    runtime = sorted((ROOT / "flows" / "runtime").glob("*.py"))
    assert {p.stem for p in runtime} == {"__init__", "api_server", "dvc_adapter", "experiments", "deps"}
    assert not [p for p in runtime if "@flow" in p.read_text()]
