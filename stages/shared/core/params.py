"""Loading params.yaml into typed, frozen dataclasses, with errors that name the bad key.

``params.yaml`` is namespaced per stage; each stage declares its section's dataclasses in
``stages/<stage>/params.py``. ``load(cls, section)`` rejects unknown keys, missing keys, wrong types and
out-of-range values (each dataclass's ``problems()``) with a ConfigError such as
``params.yaml: finetune.dp.epsilon: must be > 0 (got -1)``.

params.yaml is the one source of values: the dataclasses declare no defaults, and every field must be
present in the file, so DVC sees (and ``dvc params diff`` shows) every knob.
"""
from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union

import yaml

from .errors import ConfigError

PARAMS_FILE = "params.yaml"
#: the research studies' designs, beside params.yaml (read with it: ``read_params``)
STUDIES_FILE = "studies.yaml"

#: the privacy accountants (opacus PRV and RDP): the one type of every ``accountant`` key (finetune.dp,
#: audit.ceiling.planned.<regime>, selfcheck)
Accountant = Literal["prv", "rdp"]


def _read_yaml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ConfigError(f"{path}: params file not found")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    return data


def read_params(path: str | Path = PARAMS_FILE) -> dict[str, Any]:
    """The params of a project: ``path`` (params.yaml, the pipeline's keys) with the studies file beside it
    (``STUDIES_FILE``, the research studies' designs) merged in where there is one; a key both files hold is refused,
    so every key has one home. Nothing is remembered between calls (what a name only params declare, a text
    dataset, resolves against the mapping a caller passes on: ``stages.shared.datasets.get_dataset(name, raw)``)."""
    path = Path(path)
    data = _read_yaml(path)
    studies = path.parent / STUDIES_FILE
    if path.name != STUDIES_FILE and studies.is_file():
        data = merge_studies(data, _read_yaml(studies), studies)
    return data


def merge_studies(params: dict, studies: dict, where: str | Path = STUDIES_FILE) -> dict:
    """``params`` with the studies file's sections added (its ``variance`` keys beside params.yaml's); a key both
    hold is a ConfigError naming it."""
    out = dict(params)
    for key, value in studies.items():
        if key not in out:
            out[key] = value
            continue
        if not (isinstance(value, dict) and isinstance(out[key], dict)):
            raise ConfigError(f"{where}: {key}: also in the params file (a key lives in one of the two)")
        both = sorted(set(value) & set(out[key]))
        if both:
            raise ConfigError(f"{where}: {key}.{both[0]}: also in the params file (a key lives in one of the two)")
        out[key] = {**out[key], **value}
    return out


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp))


def _coerce(tp: Any, value: Any, key: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(arg, value, key)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if errors else f"{key}: must not be null")
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{key}: must be one of {', '.join(map(repr, args))} (got {value!r})")
        return value
    if origin in (tuple, list):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list (got {value!r})")
        item_t = args[0] if args else Any
        return tuple(_coerce(item_t, v, f"{key}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping (got {value!r})")
        val_t = args[1] if len(args) == 2 else Any
        return {str(k): _coerce(val_t, v, f"{key}.{k}") for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        return build(tp, value, key)
    if tp is Any:
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true/false (got {value!r})")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected an integer (got {value!r})")
        return value
    if tp is float:
        if isinstance(value, str):  # YAML 1.1 reads 1e-5 as a string
            try:
                return float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number (got {value!r})")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string (got {value!r})")
        return value
    raise TypeError(f"unsupported params type {_type_name(tp)} at {key}")


def build(cls: type, data: Any, prefix: str) -> Any:
    """Build dataclass ``cls`` from ``data``; ``prefix`` is the dotted params key (for errors)."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix}: expected a mapping (got {data!r})")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    for k in data:
        if k not in names:
            raise ConfigError(f"{prefix}.{k}: unknown key (known: {', '.join(names)})")
    kwargs = {}
    for f in dataclasses.fields(cls):
        key = f"{prefix}.{f.name}"
        if f.name not in data:
            raise ConfigError(f"{key}: required key is missing (params.yaml is the one source of every value)")
        kwargs[f.name] = _coerce(hints[f.name], data[f.name], key)
    obj = cls(**kwargs)
    for name, msg in obj.problems() if hasattr(obj, "problems") else ():
        raise ConfigError(f"{prefix}.{name}: {msg}")
    return obj


def section_of(raw: dict, section: str) -> Any:
    """The value at a dotted key of the params (None where a part is missing)."""
    node: Any = raw
    for part in section.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def load(cls: type, section: str, path: str | Path = PARAMS_FILE, raw: dict | None = None) -> Any:
    """``cls`` built from the (dotted) ``section`` of params.yaml; errors start with the file's path.

    A section whose values must agree with another section's declares ``relations(raw)``: its
    ``[(dotted key, message)]`` problems are refused here, so the stage and the whole-file check
    (``stages.params.validate_params``) run the same rule."""
    raw = read_params(path) if raw is None else raw
    try:
        obj = build(cls, section_of(raw, section), section)
        for key, msg in obj.relations(raw) if hasattr(obj, "relations") else ():
            raise ConfigError(f"{key}: {msg}")
        return obj
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def check(cond: bool, name: str, msg: str, value: Any) -> list[tuple[str, str]]:
    """One ``problems()`` entry: ``[(field, "msg (got value)")]`` unless ``cond`` holds."""
    return [] if cond else [(name, f"{msg} (got {value!r})")]


def deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def run_names(raw: dict, path: str | Path = PARAMS_FILE) -> list[str]:
    """The names of ``runs:`` (one fine-tune, attack and audit entry each)."""
    runs = raw.get("runs") or {}
    if not isinstance(runs, dict):
        raise ConfigError(f"{path}: runs: expected a mapping of run name -> finetune overrides")
    return list(runs)


def require_run(raw: dict, run: str, path: str | Path = PARAMS_FILE) -> None:
    """The one check that ``run`` names an entry of ``runs:`` (finetune and attack stages, the root params)."""
    names = run_names(raw, path)
    if run not in names:
        raise ConfigError(f"{path}: runs.{run}: no such run (known: {', '.join(names) or 'none'})")


def missing_keys(keys, known, prefix: str, what: str) -> list[tuple[str, str]]:
    """A ``relations()`` entry per key of ``keys`` not in ``known``: ``[("<prefix>.<key>", "no such <what> ...")]``."""
    known = list(known)
    return [(f"{prefix}.{k}", f"no such {what} (known: {', '.join(map(str, known)) or 'none'})")
            for k in keys if k not in known]


