"""Typed records that cross stages: frozen dataclasses with one reader (``read_record``) and one writer
(``record_json``).

A record class is a ``@record`` dataclass (frozen, keyword-only). ``read_record(cls, data, where)`` builds it from
parsed JSON and refuses, in one line naming the key (``where.key``), an unknown key, a missing required key or a
value of the wrong type; ``record_json(obj)`` writes it back in field order. Two kinds of field keep a file's shape:

* ``optional()``: a field that a record of some kind does not have: left out of the JSON when None (a field typed
  ``X | None`` without it is always written, its null a statement);
* ``flattened(pattern)``: a ``dict[str, X]`` whose keys sit beside the record's own in the JSON (e.g. the bounds
  per confidence, ``eps_lb_95``): on reading it takes the unknown keys matching the regular expression ``pattern``.

Why not pydantic (a dependency of prefect): its validation of stdlib dataclasses cannot tell a left-out field from
a null one on writing (``exclude_unset`` applies to its own models only), and keys beside a record's own need a
model per class; these records are stdlib dataclasses the stages already build.
"""
from __future__ import annotations

import collections.abc
import dataclasses
import enum
import inspect
import math
import re
import types
import typing
from functools import cache
from typing import Any, TypeVar, Union

from .errors import DataError

R = TypeVar("R")

_OMIT = "record_omit_none"
_FLAT = "record_flattened"


def record(cls: type[R]) -> type[R]:
    """A frozen, keyword-only dataclass read and written through this module."""
    return dataclasses.dataclass(frozen=True, kw_only=True)(cls)


def optional(**kwargs) -> Any:
    """A field left out of the JSON when None (the record of some kinds has no such value)."""
    return dataclasses.field(default=None, metadata={_OMIT: True}, **kwargs)


def flattened(pattern: str) -> Any:
    """A ``dict[str, X]`` field whose keys are written beside the record's own; reading gathers the unknown keys
    that match ``pattern`` (a regular expression, matched in full)."""
    return dataclasses.field(default_factory=dict, metadata={_FLAT: re.compile(pattern)})


def is_record(obj: Any) -> bool:
    return dataclasses.is_dataclass(obj) and not isinstance(obj, type)


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _fail(where: str, expected: Any, value: Any) -> DataError:
    shown = repr(value) if isinstance(value, (int, float, bool, str)) or value is None else type(value).__name__
    return DataError(f"{where}: expected {_type_name(expected)}, got {shown[:60]}")


def _union(tp: Any, value: Any, where: str) -> Any:
    args = typing.get_args(tp)
    if value is None:
        if type(None) in args:
            return None
        raise _fail(where, tp, value)
    options = [a for a in args if a is not type(None)]
    for arg in options:
        try:
            return _convert(arg, value, where)
        except DataError:
            if len(options) == 1:
                raise
    raise _fail(where, tp, value)


def _container(tp: Any, origin: Any, value: Any, where: str) -> Any:
    if origin in (dict, collections.abc.Mapping):
        _, val_tp = typing.get_args(tp) or (str, Any)
        if not isinstance(value, dict):
            raise _fail(where, tp, value)
        return {str(k): _convert(val_tp, v, f"{where}.{k}") for k, v in value.items()}
    if not isinstance(value, (list, tuple)):
        raise _fail(where, tp, value)
    args = typing.get_args(tp)
    if origin is tuple and args and args[-1] is not Ellipsis:
        if len(args) != len(value):
            raise DataError(f"{where}: expected {len(args)} items, got {len(value)}")
        return tuple(_convert(a, v, f"{where}[{i}]") for i, (a, v) in enumerate(zip(args, value)))
    item = args[0] if args else Any
    items = [_convert(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
    return tuple(items) if origin is tuple else items


def _nested(tp: type, value: Any, where: str) -> Any:
    """A dataclass (a record, or one with its own ``from_json``) or an enum."""
    if issubclass(tp, enum.Enum):
        try:
            return tp(value)
        except ValueError:
            raise DataError(f"{where}: must be one of {[m.value for m in tp]}, got {value!r}") from None
    own = tp.__dict__.get("from_json")  # a record with its own reader (e.g. finetune's PrivacyRecord)
    if own is None:
        return read_record(tp, value, where)
    if not isinstance(value, dict):
        raise _fail(where, tp, value)
    reader = own.__get__(None, tp)
    return reader(value, where) if len(inspect.signature(reader).parameters) > 1 else reader(value)


def _scalar(tp: type, value: Any, where: str) -> Any:
    if tp is float:
        if isinstance(value, str) and value in ("inf", "-inf"):
            return math.inf if value == "inf" else -math.inf
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif isinstance(value, tp):  # str, bool, list, dict
        return value
    raise _fail(where, tp, value)


def _convert(tp: Any, value: Any, where: str) -> Any:
    if tp is Any:
        return value
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        return _union(tp, value, where)
    if origin is typing.Literal:
        if value not in typing.get_args(tp):
            raise DataError(f"{where}: must be one of {list(typing.get_args(tp))}, got {value!r}")
        return value
    if origin in (dict, collections.abc.Mapping, list, tuple):
        return _container(tp, origin, value, where)
    if isinstance(tp, type) and (dataclasses.is_dataclass(tp) or issubclass(tp, enum.Enum)):
        return _nested(tp, value, where)
    if tp in (float, int, str, bool, list, dict):
        return _scalar(tp, value, where)
    raise TypeError(f"{where}: records cannot hold {tp!r}")


def read_record(cls: type[R], data: Any, where: str) -> R:
    """The record ``cls`` of parsed JSON ``data``; ``where`` names it in errors (``path: key.key``)."""
    if not isinstance(data, dict):
        raise _fail(where, cls, data)
    hints = _hints(cls)
    fields = dataclasses.fields(cls)
    names = {f.name for f in fields}
    flat = [f for f in fields if _FLAT in f.metadata]
    kwargs: dict[str, Any] = {f.name: {} for f in flat}
    for key, value in data.items():
        if key in names and not any(f.name == key for f in flat):
            continue
        home = next((f for f in flat if f.metadata[_FLAT].fullmatch(key)), None)
        if home is None:
            raise DataError(f"{where}: unknown key {key!r} (a record of another version?)")
        val_tp = typing.get_args(hints[home.name])[1]
        kwargs[home.name][key] = _convert(val_tp, value, f"{where}.{key}")
    for f in fields:
        if _FLAT in f.metadata:
            continue
        if f.name in data:
            kwargs[f.name] = _convert(hints[f.name], data[f.name], f"{where}.{f.name}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise DataError(f"{where}: missing key {f.name!r}")
    return cls(**kwargs)


def record_json(obj: Any) -> Any:
    """The JSON value of a record (and of what it holds): fields in order, ``optional()`` ones left out when None,
    ``flattened`` ones written beside the record's own keys, enums as their values."""
    if is_record(obj) and callable(getattr(obj, "to_json", None)):  # a record with its own writer
        return obj.to_json()
    if is_record(obj):
        out: dict[str, Any] = {}
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if _FLAT in f.metadata:
                out.update({k: record_json(v) for k, v in value.items()})
            elif not (value is None and f.metadata.get(_OMIT)):
                out[f.name] = record_json(value)
        return out
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, dict):
        return {k: record_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [record_json(v) for v in obj]
    return obj
