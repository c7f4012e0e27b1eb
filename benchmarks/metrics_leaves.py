"""Compare two metrics files leaf by leaf (reports/metrics.json of two commits, say): how many leaves each has,
which exist on one side only, and which common leaves differ.

    git show <rev>:reports/metrics.json > /tmp/before.json
    python benchmarks/metrics_leaves.py /tmp/before.json reports/metrics.json
"""
from __future__ import annotations

import json
import sys
from typing import Any, Iterator


def leaves(obj: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """(path, value) of every scalar in a JSON document; paths like /runs/nondp/privacy/epsilon_spent, [i] for lists."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from leaves(v, f"{path}/{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from leaves(v, f"{path}[{i}]")
    else:
        yield path, obj


def main(before: str, after: str) -> None:
    a, b = (dict(leaves(json.load(open(f)))) for f in (before, after))
    common = set(a) & set(b)
    differ = sorted(k for k in common if a[k] != b[k])
    print(f"leaves: {len(a)} before, {len(b)} after; {len(common)} common, {len(common) - len(differ)} equal")
    print("only before:", sorted(set(a) - set(b)))
    print("only after:", sorted(set(b) - set(a)))
    for k in differ:
        print(f"differs {k}: {a[k]!r} -> {b[k]!r}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
