"""The registry as packaged JSON, so that ``attnbook experiments`` lists it without importing it.

Importing the parts that register the experiments pulls in torch, SciPy and every model (seconds
and hundreds of MB); the list needs none of that. ``registry.json`` beside this module holds
:meth:`Experiment.describe` of every registered experiment, by part (I, II, III) and in
registration order within a part.
``python -m attnbook.experiments.registry_index`` rewrites it after the registry changes; a test
fails while it is stale.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = ["INDEX", "build", "read", "write"]

INDEX = Path(__file__).with_name("registry.json")


def build() -> list[dict]:
    """:meth:`Experiment.describe` of the package's experiments (imports them), as JSON values."""
    from . import _REGISTRY, names

    names()  # registers the parts
    # experiments registered at run time (tests, notebooks) are not the package's
    ours = [
        e for e in _REGISTRY.values() if e.function.__module__.startswith(__package__)
    ]
    # by part, not by registration order: which part registers first depends on what the
    # process imported before (a test that imports attnbook.experiments.focus, say); the sort
    # is stable, so each part keeps its own order
    ours.sort(key=lambda e: len(e.part))  # "I" < "II" < "III"
    return json.loads(json.dumps([e.describe() for e in ours]))


def read() -> list[dict] | None:
    """The packaged index, or ``None`` when it is missing or unreadable."""
    try:
        return json.loads(INDEX.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def write() -> list[dict]:
    """Rebuild the index from the registry and write it (atomically)."""
    index = build()
    tmp = INDEX.with_name(f".{INDEX.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(index, indent=1, ensure_ascii=False) + "\n", "utf-8")
    os.replace(tmp, INDEX)
    return index


if __name__ == "__main__":
    print(f"indexed {len(write())} experiments in {INDEX}")
