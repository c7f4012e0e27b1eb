"""The layout's promises, checked from the code itself.

* every file a stage's command imports (lazy imports inside functions included) is covered by that
  stage's ``deps:`` in dvc.yaml, so a code change reruns exactly the stages it touches;
* a stage package imports only the shared packages, its own modules and upstream public schema modules;
* a flow imports only the public surface of the stages (``flow_internal_imports``);
* no module imports itself through others (``import_cycles``), lazy imports inside functions included;
* no function is longer than ~60 lines unless its docstring says why;
* importing any module changes no process state (environment, warning filters, torch's RNG).
"""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from support import ROOT

#: what each shared package may import (besides itself); stage packages may import all of them
SHARED = {"core": set(), "lm": {"core"}, "datasets": {"core"}}
MAX_LINES = 60
#: modules at the package root: stages/params.py is the root of params.yaml and imports every stage's params
#: module; no stage imports it (a stage loading it would have every params module in its DVC deps)
ROOT_MODULES = {"__init__.py", "params.py"}


def module_file(module: str, root: Path = ROOT) -> Path | None:
    p = root.joinpath(*module.split("."))
    if (p / "__init__.py").is_file():
        return p / "__init__.py"
    return p.with_suffix(".py") if p.with_suffix(".py").is_file() else None


def import_statements(path: Path, root: Path = ROOT) -> list[tuple[str, list[str] | None]]:
    """(module, names) of every import statement anywhere in the file, relative ones resolved: ``import a.b`` is
    ("a.b", None), ``from a import x, y`` is ("a", ["x", "y"])."""
    package = list(path.relative_to(root).parts[:-1])  # the package a relative import starts from
    out: list[tuple[str, list[str] | None]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(a.name, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            out.append((target, [a.name for a in node.names]))
    return out


def imported_modules(path: Path, root: Path = ROOT) -> set[str]:
    """Every module (and ``module.name``) an import statement anywhere in the file names, relative ones resolved."""
    out: set[str] = set()
    for target, names in import_statements(path, root):
        out.add(target)
        out.update(f"{target}.{n}" for n in names or ())
    return out | discovered(path, root)


def discovers_submodules(path: Path) -> bool:
    """A package ``__init__`` that imports every module of its directory (``pkgutil.iter_modules(__path__)``)."""
    return path.name == "__init__.py" and "pkgutil.iter_modules(__path__)" in path.read_text()


def discovered(path: Path, root: Path = ROOT) -> set[str]:
    """The modules a discovering package ``__init__`` imports: every module file of its directory."""
    if not discovers_submodules(path):
        return set()
    package = ".".join(path.parent.relative_to(root).parts)
    return {f"{package}.{p.stem}" for p in path.parent.glob("*.py") if p.name != "__init__.py"}


def import_closure(module: str, root: Path = ROOT) -> set[Path]:
    """The project files executed by importing ``module`` (packages' __init__ included), transitively."""
    seen: set[Path] = set()
    todo = [module]
    while todo:
        parts = todo.pop().split(".")
        if parts[0] != "stages":
            continue
        for i in range(1, len(parts) + 1):  # importing a.b.c runs a/__init__, a/b/__init__, then a/b/c
            f = module_file(".".join(parts[:i]), root)
            if f is not None and f not in seen:
                seen.add(f)
                todo += sorted(imported_modules(f, root))
    return seen


def dvc_stages(root: Path = ROOT) -> dict[str, tuple[str, list[str]]]:
    """stage address -> (cmd, dep paths as written), foreach stages expanded, read through DVC itself."""
    from dvc.repo import Repo

    with Repo(str(root)) as repo:
        return {s.name: (s.cmd, [d.def_path for d in s.deps]) for s in repo.index.stages}


def uncovered(root: Path = ROOT) -> dict[str, list[str]]:
    """stage -> imported project files none of its deps covers."""
    out = {}
    for name, (cmd, deps) in dvc_stages(root).items():
        m = re.match(r"python -m (stages\.\w+)", cmd)
        assert m, f"{name}: command {cmd!r} is not `python -m stages.<stage>`"
        files = import_closure(f"{m.group(1)}.__main__", root)
        rel = sorted(str(f.relative_to(root)) for f in files)
        missing = [f for f in rel if not any(f == d or f.startswith(d.rstrip("/") + "/") for d in deps)]
        if missing:
            out[name] = missing
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
    """Every strongly connected set of more than one project module (stages/, flows/) in the import graph, lazy
    imports inside functions included: each is an import cycle."""
    files = sorted(p for d in ("stages", "flows") if (root / d).is_dir() for p in (root / d).rglob("*.py"))
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


def test_dvc_deps_cover_each_stage_import_closure():
    assert uncovered() == {}


def test_a_missing_dep_is_caught(tmp_path):
    """The check above can fail: drop one code dep from a copy of dvc.yaml and it names the stage and file."""
    import shutil

    for item in ("stages", "dvc.yaml", "params.yaml", ".dvcignore"):
        src = ROOT / item
        (shutil.copytree(src, tmp_path / item, ignore=shutil.ignore_patterns("__pycache__")) if src.is_dir()
         else shutil.copy2(src, tmp_path / item))
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["dvc", "init", "-q"], cwd=tmp_path, check=True)
    dvc_yaml = tmp_path / "dvc.yaml"
    text = dvc_yaml.read_text()
    dropped = "      - stages/attack/schema.py\n"  # the audit stage reads the attack's schema module
    assert text.count(dropped) == 3  # audit, variance, report (in this order)
    dvc_yaml.write_text(text.replace(dropped, "", 1))
    assert uncovered(tmp_path) == {"audit": ["stages/attack/schema.py"]}


def test_stage_packages_import_only_shared_code_and_upstream_schemas():
    stages = sorted(p.name for p in (ROOT / "stages").iterdir() if (p / "__main__.py").is_file())
    assert stages == ["attack", "audit", "base_model", "canaries", "finetune", "preprocess", "report", "secrets",
                      "variance"]
    problems = []
    for path in sorted((ROOT / "stages").rglob("*.py")):
        owner = path.relative_to(ROOT / "stages").parts[0]
        for mod in imported_modules(path):
            parts = mod.split(".")
            if parts[0] != "stages" or len(parts) < 2 or parts[1] == owner or owner in ROOT_MODULES:
                continue
            if owner in SHARED:
                ok = parts[1] in SHARED[owner]
            else:  # shared code, or an upstream stage's public surface: its schema, params or api module
                ok = parts[1] in SHARED or parts[2:3] in (["schema"], ["params"], ["api"])
            if not ok:
                problems.append(f"{path.relative_to(ROOT)} imports {mod}")
    assert problems == []


#: the public surface of the stages for the flows: the shared packages and the root params (any module of them), a
#: stage's package itself, and its ``schema`` (contract), ``params`` (its section) and ``api`` (the functions flows
#: call) modules; every other module of a stage is internal to it
PUBLIC_PACKAGES = {"core", "lm", "datasets", "params"}
PUBLIC_MODULES = {"schema", "params", "api"}


def flow_internal_imports(root: Path = ROOT) -> list[str]:
    """Every import in flows/ of a stage module outside the public surface (lazy imports inside functions included)."""
    problems = []
    for path in sorted((root / "flows").rglob("*.py")):
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


def test_flows_import_only_the_public_surface_of_the_stages():
    assert flow_internal_imports() == []


def test_a_flow_importing_a_stage_internal_is_caught(tmp_path):
    """The check above can fail: a copy of the tree whose flow imports a stage internal (eagerly, lazily or as a
    submodule of the package) is named, and the public forms are not."""
    import shutil

    shutil.copytree(ROOT / "stages", tmp_path / "stages", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "flows").mkdir()
    (tmp_path / "flows" / "bad.py").write_text(
        "from stages.audit.study import study_rows\nfrom stages.finetune import export\n"
        "def f():\n    import stages.base_model.convert\n")
    (tmp_path / "flows" / "good.py").write_text(
        "from stages.audit.api import study_rows\nfrom stages.audit.schema import confidence_key\n"
        "from stages.core.formatting import fmt\nfrom stages.params import load_params\n"
        "from stages.datasets import get_dataset\nfrom stages.finetune.params import load_finetune\n")
    assert flow_internal_imports(tmp_path) == [
        "flows/bad.py imports stages.audit.study", "flows/bad.py imports stages.audit.study.study_rows",
        "flows/bad.py imports stages.base_model.convert", "flows/bad.py imports stages.finetune.export"]


def _functions(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


#: the code the size rules cover (tests are not held to them: a test reads top to bottom)
CODE = ("stages", "flows", "benchmarks")
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
ours = (os.path.join(os.getcwd(), "stages"), os.path.join(os.getcwd(), "flows"))
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
for root in ("stages", "flows"):
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
