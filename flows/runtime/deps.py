"""Each DVC stage's code deps are exactly the project modules its command imports (``python -m flows.runtime.deps``).

A stage's command is ``python -m stages.<stage>``; the files Python runs for it are the import closure of
``stages.<stage>.__main__``: every import statement anywhere in a file (lazy imports inside functions included), a
package's ``__init__`` before its modules, and every module of a package whose ``__init__`` discovers its directory
(``pkgutil.iter_modules(__path__)``). dvc.yaml lists that closure for each stage, a folder standing for all of its
modules where every one of them is in the closure, so editing a module reruns exactly the stages that import it.

``python -m flows.runtime.deps`` (no flag) exits 1 naming each stage whose listed code deps differ from its closure, or
whose replicated runs' datasets (``REPLICA_STAGES``) differ from params.yaml's; ``--write`` rewrites the code part
of each stage's ``deps: [...]`` in dvc.yaml (the lines after ``CODE_MARK``, wrapped) and those datasets (comments and
other data deps kept);
``--lock`` exits 1 naming each stage whose code, params or raw-data deps no longer match dvc.lock (outputs absent
from a clean clone's cache are fine): CI runs it, so main's dvc.lock is main's code's.
tests/shared/core/test_layout.py checks the equality."""
from __future__ import annotations

import argparse
import ast
import functools
import re
import sys
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parents[2]
#: dvc.yaml's line that opens the code part of a stage's ``deps: [...]`` (data deps above it, one per line)
CODE_MARK = "# code: the command's import closure (python -m flows.runtime.deps --write)"
#: the width the code deps are wrapped to
WIDTH = 118
#: stages whose foreach items (``replicas.sets.<name>: {run, seed}``) cannot name their run's dataset and secrets in
#: DVC's own templating (no nested ``${runs.${item.run}.dataset}``): dvc.yaml lists the replicated runs' datasets
#: and secrets files, one line each where the first such line stands, written by ``--write`` from params.yaml and
#: checked here
REPLICA_STAGES = ("replica_finetune", "replica_attack")
REPLICA_NOTE = "# replicated runs' {} (python -m flows.runtime.deps --write)"
#: one such line: group 1 the dataset (``${preprocess.out_dir}/<dataset>``) or group 2 the secrets name
#: (``${secrets.out_dir}/<secrets>.parquet``)
REPLICA_DEP = re.compile(r'^\s+"\$\{(?:preprocess\.out_dir\}/(\S+)|secrets\.out_dir\}/(\S+)\.parquet)",\s+'
                         + re.escape(REPLICA_NOTE).replace(r"\{\}", "(?:datasets|secrets)") + "$")


def module_file(module: str, root: Path = ROOT) -> Path | None:
    p = root.joinpath(*module.split("."))
    if (p / "__init__.py").is_file():
        return p / "__init__.py"
    return p.with_suffix(".py") if p.with_suffix(".py").is_file() else None


def import_statements(path: Path, root: Path = ROOT) -> list[tuple[str, list[str] | None]]:
    """(module, names) of every import statement anywhere in the file, relative ones resolved: ``import a.b`` is
    ("a.b", None), ``from a import x, y`` is ("a", ["x", "y"]). Each version of a file is parsed once per process (a
    closure visits a shared module once per stage)."""
    st = path.stat()
    return list(_import_statements(path, root, st.st_mtime_ns, st.st_size))


@functools.lru_cache(maxsize=None)
def _import_statements(path: Path, root: Path, mtime_ns: int, size: int) -> tuple[tuple[str, list[str] | None], ...]:
    """``import_statements`` of the file's version (path, modification time, size)."""
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
    return tuple(out)


def discovers_submodules(path: Path) -> bool:
    """A package ``__init__`` that imports every module of its directory (``pkgutil.iter_modules(__path__)``)."""
    return path.name == "__init__.py" and "pkgutil.iter_modules(__path__)" in path.read_text()


def discovered(path: Path, root: Path = ROOT) -> set[str]:
    """The modules a discovering package ``__init__`` imports: every module file of its directory."""
    if not discovers_submodules(path):
        return set()
    package = ".".join(path.parent.relative_to(root).parts)
    return {f"{package}.{p.stem}" for p in path.parent.glob("*.py") if p.name != "__init__.py"}


def imported_modules(path: Path, root: Path = ROOT) -> set[str]:
    """Every module (and ``module.name``) an import statement anywhere in the file names, relative ones resolved."""
    out: set[str] = set()
    for target, names in import_statements(path, root):
        out.add(target)
        out.update(f"{target}.{n}" for n in names or ())
    return out | discovered(path, root)


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


def stage_module(cmd: str) -> str:
    m = re.match(r"python -m (stages\.\w+)", cmd)
    if not m:
        raise ValueError(f"command {cmd!r} is not `python -m stages.<stage>`")
    return m.group(1)


def closure_files(cmd: str, root: Path = ROOT) -> set[str]:
    """The project files (relative paths) the stage command ``cmd`` runs."""
    return {str(f.relative_to(root)) for f in import_closure(f"{stage_module(cmd)}.__main__", root)}


def sources(path: str, root: Path = ROOT) -> set[str]:
    """The Python files a code dep names: the file, or every module under the folder."""
    p = root / path
    if p.is_dir():
        return {str(f.relative_to(root)) for f in p.rglob("*.py") if "__pycache__" not in f.parts}
    return {path}


def compact(files: set[str], root: Path = ROOT) -> list[str]:
    """``files`` as dvc.yaml lists them: a folder where every module under it is in ``files``, else the file."""
    out: set[str] = set()
    for f in files:
        parts = Path(f).parts
        best = f
        for i in range(len(parts) - 1, 1, -1):  # the largest folder below stages/ all of whose modules are in
            folder = "/".join(parts[:i])
            if sources(folder, root) <= files:
                best = folder
        out.add(best)
    return sorted(out)


def stages_of(root: Path = ROOT) -> dict[str, str]:
    """dvc.yaml's top-level stage name -> its command (one command shape per stage; foreach items share it)."""
    import yaml

    spec = yaml.safe_load((root / "dvc.yaml").read_text())["stages"]
    return {name: (s.get("do", s))["cmd"] for name, s in spec.items()}


def listed(root: Path = ROOT) -> dict[str, list[str]]:
    """Stage name -> the code deps (``stages/...`` entries) dvc.yaml lists in its deps."""
    import yaml

    spec = yaml.safe_load((root / "dvc.yaml").read_text())["stages"]
    return {name: [d for d in (s.get("do", s)).get("deps") or [] if d == "stages" or d.startswith("stages/")]
            for name, s in spec.items()}


def deps_blocks(lines: list[str]):
    """(stage name, (first, end) line indices of its ``deps: [...]``) of dvc.yaml's stages."""
    stage, first = None, None
    for k, line in enumerate(lines):
        top = re.match(r"^  (\w+):\s*$", line)
        if top or (line.strip() and not line.startswith(" ")):
            stage, first = (top.group(1) if top else None), None
        elif stage and re.match(r"^\s+deps: \[\s*$", line):
            first = k
        elif stage and first is not None and line.split("#")[0].rstrip().endswith("]"):
            yield stage, (first, k + 1)
            first = None


def wrapped(items: list[str], indent: str, width: int = WIDTH) -> list[str]:
    """``items`` as the lines of a YAML flow sequence's tail: comma-separated, wrapped at ``width``, closed by ``]``."""
    lines, cur = [], indent
    for k, item in enumerate(items):
        token = item + ("]" if k == len(items) - 1 else ",")
        if cur != indent and len(cur) + 1 + len(token) > width:
            lines.append(cur)
            cur = indent
        cur += ("" if cur == indent else " ") + token
    return lines + [cur]


def differences(root: Path = ROOT) -> dict[str, dict[str, list[str]]]:
    """Stage -> {"missing": imported but not listed, "extra": listed but not imported}; empty when they agree."""
    have = listed(root)
    out = {}
    for stage, cmd in stages_of(root).items():
        want = closure_files(cmd, root)
        got = set().union(*(sources(d, root) for d in have.get(stage, []))) if have.get(stage) else set()
        if want != got:
            out[stage] = {"missing": sorted(want - got), "extra": sorted(got - want)}
    return out


def write(root: Path = ROOT) -> list[str]:
    """Rewrite each stage's code deps in dvc.yaml (the lines after ``CODE_MARK`` in its ``deps: [...]``) to its
    closure, and the replica stages' datasets; returns the stages changed."""
    cmds, have = stages_of(root), listed(root)
    replicas = replica_differences(root)
    lines = (root / "dvc.yaml").read_text().splitlines()
    out, changed, at = [], [], 0
    for stage, (first, end) in deps_blocks(lines):
        out += lines[at:first]
        block = lines[first:end]
        mark = next(k for k, line in enumerate(block) if line.strip() == CODE_MARK)
        indent = block[mark][: len(block[mark]) - len(block[mark].lstrip())]
        data = block[:mark + 1]
        if stage in REPLICA_STAGES:
            if stage in replicas:
                changed.append(stage)
            k = next(k for k, line in enumerate(data) if REPLICA_DEP.match(line))
            data = [line for line in data if not REPLICA_DEP.match(line)]
            data[k:k] = ([indent + f'"${{preprocess.out_dir}}/{d}",'.ljust(40) + "  " + REPLICA_NOTE.format("datasets")
                          for d in replica_datasets(root)]
                         + [indent + f'"${{secrets.out_dir}}/{n}.parquet",'.ljust(40) + "  "
                            + REPLICA_NOTE.format("secrets") for n in replica_secrets(root)])
        new = compact(closure_files(cmds[stage], root), root)
        if new != have.get(stage) and stage not in changed:
            changed.append(stage)
        out += data + wrapped(new, indent)
        at = end
    out += lines[at:]
    (root / "dvc.yaml").write_text("\n".join(out) + "\n")
    return changed


def _replicated(root: Path, key: str) -> list[str]:
    """``runs.<run>.<key>`` (over ``finetune.<key>``) of every replicated run, sorted and distinct."""
    from stages.shared.core.params import deep_merge, read_params

    raw = read_params(root / "params.yaml")
    runs, shared = raw.get("runs") or {}, raw.get("finetune") or {}
    sets = (raw.get("replicas") or {}).get("sets") or {}
    return sorted({deep_merge(shared, runs.get(rep.get("run")) or {}).get(key) for rep in sets.values()} - {None})


def replica_datasets(root: Path = ROOT) -> list[str]:
    """The datasets the replicated runs read (``runs.<run>.dataset`` over ``finetune.dataset``), sorted."""
    return _replicated(root, "dataset")


def replica_secrets(root: Path = ROOT) -> list[str]:
    """The secrets files the replicated runs read (``runs.<run>.secrets`` over ``finetune.secrets``), sorted."""
    return _replicated(root, "secrets")


def replica_listed(lines: list[str]) -> tuple[list[str], list[str]]:
    """(datasets, secrets) that ``REPLICA_DEP`` lines among ``lines`` name, each sorted."""
    found = [m for line in lines if (m := REPLICA_DEP.match(line))]
    return sorted(m.group(1) for m in found if m.group(1)), sorted(m.group(2) for m in found if m.group(2))


def replica_differences(root: Path = ROOT) -> dict[str, dict[str, tuple[list[str], list[str]]]]:
    """Replica stage -> {"listed": (datasets, secrets) its deps name, "read": those its runs read}; empty when they
    agree."""
    want = (replica_datasets(root), replica_secrets(root))
    lines = (root / "dvc.yaml").read_text().splitlines()
    out = {}
    for stage, (first, end) in deps_blocks(lines):
        if stage in REPLICA_STAGES:
            got = replica_listed(lines[first:end])
            if got != want:
                out[stage] = {"listed": got, "read": want}
    return out


def dvc_changes(root: Path = ROOT, stages: Sequence[str] = ()) -> dict[str, dict[str, list[str]]]:
    """DVC's own verdict (``dvc status --json``), sorted: stage -> {"stale": code, params or raw-data deps that
    differ from dvc.lock, "missing": its outputs and the upstream outputs it reads, absent from the workspace (a
    clean clone without the DVC cache), "altered": its outputs changed on disk since dvc.lock, "other": anything else
    DVC says}. Only "stale" means the lock no longer describes the code, params and raw data."""
    from flows.runtime.dvc_adapter import dvc_status

    outs = produced(root)
    out: dict[str, dict[str, list[str]]] = {}
    for stage, changes in dvc_status(root, stages).items():
        got: dict[str, list[str]] = {"stale": [], "missing": [], "altered": [], "other": []}
        for change in changes if isinstance(changes, list) else [changes]:
            if not isinstance(change, dict):
                got["other"].append(str(change))
                continue
            for kind, entries in change.items():
                for path, state in (entries or {}).items() if isinstance(entries, dict) else [(kind, entries)]:
                    if isinstance(state, dict):  # params: {file: {key: state}}
                        got["stale"] += [f"{path}:{k} ({v})" for k, v in state.items()]
                    elif kind == "changed outs":  # absent from a clean clone; altered by hand
                        got["altered" if state == "modified" else "missing"].append(path)
                    elif kind == "changed deps" and upstream_output(path, outs):  # the upstream stage's own status
                        got["missing"].append(path)  # says whether it is absent or altered
                    elif kind == "changed deps":
                        got["stale"].append(f"{path} ({state})")
                    else:
                        got["other"].append(f"{path} ({state})")
        out[stage] = got
    return out


def produced(root: Path = ROOT) -> set[str]:
    """Every output path dvc.lock records (what some stage writes)."""
    from stages.shared.core.lineage import load_lock

    return {o["path"] for st in load_lock(root / "dvc.lock").values() for o in st.get("outs") or []}


def upstream_output(path: str, outs: set[str]) -> bool:
    """``path`` is (in, or holds) another stage's output: its change is that stage's, not a change of code or data."""
    p = path.rstrip("/")
    return any(p == o or p.startswith(o + "/") or o.startswith(p + "/") for o in outs)


def orphans(root: Path = ROOT) -> list[str]:
    """Stages dvc.lock records that dvc.yaml no longer has (``dvc repro`` keeps their entries): their records would
    enter a lineage chain as producers of outputs nothing writes any more."""
    from dvc.repo import Repo

    from stages.shared.core.lineage import load_lock

    with Repo(str(root)) as repo:
        names = {s.name for s in repo.index.stages}
    return sorted(k for k in load_lock(root / "dvc.lock") if k not in names)


def prune(root: Path = ROOT) -> list[str]:
    """Drop the orphans' entries from dvc.lock (text kept as DVC wrote it otherwise); returns them."""
    gone = set(orphans(root))
    lines, out, skip = (root / "dvc.lock").read_text().splitlines(), [], False
    for line in lines:
        m = re.match(r"^  (\S+):\s*$", line)
        if m or not line.startswith("    "):
            skip = bool(m) and m.group(1) in gone
        if not skip:
            out.append(line)
    (root / "dvc.lock").write_text("\n".join(out) + "\n")
    return sorted(gone)


def stale(root: Path = ROOT, stages: Sequence[str] = ()) -> dict[str, list[str]]:
    """Stage -> its deps (code, params, data) that no longer match dvc.lock, and every dvc.lock entry of a stage
    dvc.yaml no longer has; empty when main's lock is main's."""
    out = {s: c["stale"] for s, c in dvc_changes(root, stages).items() if c["stale"]}
    if not stages:
        out.update({s: ["not in dvc.yaml (python -m flows.runtime.deps --prune drops its dvc.lock entry)"]
                    for s in orphans(root)})
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flows.runtime.deps", description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="rewrite dvc.yaml's code deps to each stage's closure")
    ap.add_argument("--lock", action="store_true",
                    help="check that dvc.lock matches the code and params (exit 1 naming each stale stage)")
    ap.add_argument("--prune", action="store_true", help="drop dvc.lock entries of stages dvc.yaml no longer has")
    args = ap.parse_args(argv)
    if args.prune:
        print(f"dvc.lock: dropped {', '.join(prune()) or 'nothing'}")
        return 0
    if args.lock:
        bad = stale()
        for stage, what in bad.items():
            hint = "" if what[0].startswith("not in dvc.yaml") else f" (rerun `dvc repro {stage}` and commit dvc.lock)"
            print(f"dvc.lock is stale for {stage}: {', '.join(what)}{hint}")
        print(f"dvc.lock: {'%d stale stages' % len(bad) if bad else 'matches the code and params of every stage'}")
        return 1 if bad else 0
    if args.write:
        changed = write()
        print(f"dvc.yaml: code deps rewritten for {', '.join(changed) or 'no stage'}")
        return 0
    diff, data = differences(), replica_differences()
    for stage, d in diff.items():
        print(f"dvc.yaml stage {stage}: missing {d['missing'] or '-'}; not imported {d['extra'] or '-'}")
    for stage, d in data.items():
        print(f"dvc.yaml stage {stage}: lists datasets {d['listed'] or '-'}; its runs read {d['read'] or '-'}")
    return 1 if diff or data else 0


if __name__ == "__main__":
    sys.exit(main())
