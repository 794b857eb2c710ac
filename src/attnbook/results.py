"""Saving experiment results safely: dataclasses of arrays to ``.npz`` and back, never pickle.

A result dataclass keeps its arrays as fields and free-form metadata in an ``info`` dict. Only
plain values of ``info`` are written (numbers, strings, booleans, and numeric arrays), each
under ``info_<key>``; other values (nested dicts, objects) are left out. :func:`load_fields`
reads with ``allow_pickle=False`` and gives plain values back as Python scalars and arrays as
arrays. A file is written to a temporary name beside its target and renamed, so a reader
never sees half a file.
"""

from __future__ import annotations

import hashlib
import numbers
import os
from dataclasses import fields, is_dataclass
from pathlib import Path

import numpy as np

__all__ = ["save_fields", "load_fields", "file_sha256"]


def file_sha256(path) -> str:
    """Hex SHA-256 of a file's bytes, read in 1 MiB blocks (the one checksum of the package:
    downloaded excerpts and archives, stored points, chapter sources)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _plain(value) -> bool:
    if isinstance(value, (str, bool, np.bool_)):
        return True
    if isinstance(value, numbers.Real):
        return True
    return isinstance(value, np.ndarray) and value.dtype.kind in "biuf"


def save_fields(result, path) -> Path:
    """Write every field of the dataclass ``result`` (and plain ``info`` values) to ``path``.

    ``.npz`` is appended when ``path`` has another suffix. Returns the path written.
    """
    if not is_dataclass(result) or isinstance(result, type):
        raise TypeError(
            f"result must be a dataclass instance, got {type(result).__name__}"
        )
    path = Path(path)
    if path.suffix != ".npz":
        path = path.with_name(path.name + ".npz")
    arrays = {}
    for f in fields(result):
        if f.name == "info":
            continue
        value = getattr(result, f.name)
        if hasattr(value, "detach"):
            value = value.detach().cpu().numpy()
        arrays[f.name] = np.asarray(value)
        if arrays[f.name].dtype == object:
            raise TypeError(f"field {f.name!r} of result is not a numeric array")
    for key, value in (getattr(result, "info", None) or {}).items():
        if _plain(value):
            arrays["info_" + key] = np.asarray(value)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as fh:
            np.savez(fh, **arrays)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def load_fields(cls, path) -> tuple[dict, dict]:
    """``(fields, info)`` read back from an ``.npz`` written by :func:`save_fields` for ``cls``.

    Fields come back as arrays (0-d for scalars); ``info`` values written from a number,
    string or boolean come back as that Python value, arrays as arrays.
    """
    with np.load(path, allow_pickle=False) as z:
        kw = {
            f.name: z[f.name] for f in fields(cls) if f.name != "info" and f.name in z
        }
        info = {}
        for k in z.files:
            if k.startswith("info_"):
                v = z[k]
                info[k[len("info_") :]] = v.item() if v.ndim == 0 else v
    return kw, info
