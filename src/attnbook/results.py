"""Saving experiment results safely: dataclasses of arrays to ``.npz`` and back, never pickle.

A result dataclass keeps its arrays as fields and free-form metadata in an ``info`` dict. Only
plain values (numbers, strings, booleans, numeric arrays) of ``info`` are written, each under
``info_<key>``; :func:`load_fields` reads with ``allow_pickle=False``.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import numpy as np

__all__ = ["save_fields", "load_fields"]


def save_fields(result, path) -> Path:
    """Write every field of the dataclass ``result`` (and plain ``info`` values) to ``path``."""
    path = Path(path)
    arrays = {
        f.name: np.asarray(getattr(result, f.name))
        for f in fields(result)
        if f.name != "info"
    }
    for key, value in getattr(result, "info", {}).items():
        if isinstance(value, (int, float, str, bool)) or (
            isinstance(value, np.ndarray) and value.dtype != object
        ):
            arrays["info_" + key] = np.asarray(value)
    np.savez(path, **arrays)
    return path


def load_fields(cls, path) -> tuple[dict, dict]:
    """``(fields, info)`` read back from an ``.npz`` written by :func:`save_fields` for ``cls``."""
    with np.load(path, allow_pickle=False) as z:
        kw = {
            f.name: z[f.name] for f in fields(cls) if f.name != "info" and f.name in z
        }
        info = {k[len("info_") :]: z[k] for k in z.files if k.startswith("info_")}
    return kw, info
