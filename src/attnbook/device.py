"""Where tensors live and how random draws are seeded.

``default_device()`` picks CUDA when it is available and CPU otherwise; the environment
variable ``ATTNBOOK_DEVICE`` (e.g. ``cpu``) or an explicit argument overrides it.

Random state: every function in the package that draws random numbers, NumPy code included,
takes ``seed``, an ``int``, a ``torch.Generator`` or ``None``, and turns it into a generator
with :func:`as_generator`, the one normaliser. The same int seed gives the same numbers on the
CPU; ``seed=None`` means torch's global generator (seeded by :func:`seed_everything`), never
silently 0.
"""

from __future__ import annotations

import hashlib
import os
import random

import numpy as np
import torch

__all__ = [
    "default_device",
    "as_generator",
    "seed_everything",
    "stream_seed",
    "on_colab",
    "describe",
    "default_dtype",
    "resolve_device",
]


def default_device(prefer: str | torch.device | None = None) -> torch.device:
    """Return ``prefer`` if given, else ``$ATTNBOOK_DEVICE``, else CUDA if available, else CPU."""
    choice = prefer if prefer is not None else os.environ.get("ATTNBOOK_DEVICE")
    if choice is not None:
        try:
            dev = torch.device(choice)
        except (RuntimeError, TypeError) as exc:
            raise ValueError(
                f"device {choice!r} is not a valid torch device: {exc}"
            ) from None
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(
                f"device {choice!r} was asked for but CUDA is not available"
            )
        return dev
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def resolve_device(device=None, like=None) -> torch.device:
    """The package's one device rule: ``device`` if given, else the device of ``like`` when
    it is a tensor, else torch's default device (the CPU unless
    ``torch.set_default_device`` says otherwise). The package never moves work to a GPU on
    its own: chapters pass ``device=ch.device`` (from :func:`default_device`), so a default
    call gives the same numbers on every machine."""
    if device is not None:
        if isinstance(device, (str, torch.device)):
            return default_device(device)  # validated: a CUDA device needs CUDA
        raise TypeError(f"device must be a str or torch.device, got {device!r}")
    if isinstance(like, torch.Tensor):
        return like.device
    return torch.get_default_device()


_DTYPE_NAMES = {"float64": torch.float64, "float32": torch.float32}


def default_dtype(dtype=None, like=None) -> torch.dtype:
    """The package's one dtype rule: ``dtype`` if given (a floating ``torch.dtype`` or its
    name), else the dtype of ``like`` when it is a floating tensor, else float64 (results
    are compared with closed forms and derivations; float32 is asked for, never assumed)."""
    if dtype is None:
        if isinstance(like, torch.Tensor) and like.is_floating_point():
            return like.dtype
        return torch.float64
    if isinstance(dtype, str):
        if dtype not in _DTYPE_NAMES:
            raise ValueError(
                f"dtype must be one of {sorted(_DTYPE_NAMES)} or a torch dtype, "
                f"got {dtype!r}"
            )
        return _DTYPE_NAMES[dtype]
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating torch dtype, got {dtype!r}")
    return dtype


def _fresh_generator(seed, device) -> torch.Generator:
    """A new ``torch.Generator`` on ``device`` seeded with the int ``seed`` (validated)."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(
            f"seed must be an int, a torch.Generator or None, got {type(seed).__name__}"
        )
    if seed < 0:
        raise ValueError(f"seed must be non-negative, got {seed}")
    g = torch.Generator(device=torch.device(device))
    g.manual_seed(int(seed))
    return g


def _draw_seed(gen: torch.Generator | None) -> int:
    """One 62-bit integer from ``gen`` (torch's global CPU generator when ``None``)."""
    gen = torch.default_generator if gen is None else gen
    return int(torch.randint(2**62, (1,), generator=gen, device=gen.device))


def as_generator(
    seed=None, device: str | torch.device | None = "cpu", *, numpy: bool = False
):
    """The package's one random-state normaliser (CONTRIBUTING.md, *Random state*).

    ``seed`` is an ``int`` (>= 0), a ``torch.Generator`` or ``None``:

    * an ``int`` gives a fresh generator seeded with it, so the same seed gives the same
      numbers;
    * a ``torch.Generator`` is used as is (its state advances). One that lives on another
      device than ``device`` (a CPU generator for chains on a GPU) seeds a fresh generator on
      ``device`` with one 62-bit draw from it, deterministic given its state;
    * ``None`` is torch's global generator — returned as ``None``, which torch's ``generator=``
      reads as the global one — seeded by :func:`seed_everything` (and so by
      ``attnbook.setup_chapter``). ``None`` never silently means 0.

    With ``numpy=True`` the result is a ``numpy.random.Generator`` for NumPy code:
    ``np.random.default_rng(seed)`` for an int (the stream NumPy gives that seed), and for a
    ``torch.Generator`` or ``None`` one seeded with a 62-bit draw from it (from torch's
    global generator for ``None``). ``device`` is ignored then.

    Raises ``TypeError`` for any other type and ``ValueError`` for a negative seed.
    """
    if numpy:
        if seed is None or isinstance(seed, torch.Generator):
            return np.random.default_rng(_draw_seed(seed))
        _fresh_generator(seed, "cpu")  # validates
        return np.random.default_rng(int(seed))
    dev = torch.device(device if device is not None else "cpu")
    if seed is None:
        return None
    if isinstance(seed, torch.Generator):
        if seed.device.type == dev.type:
            return seed
        return _fresh_generator(_draw_seed(seed), dev)
    return _fresh_generator(seed, dev)


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's global generators (for code we do not control)."""
    _fresh_generator(seed, "cpu")  # validates
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _purpose_words(purpose) -> list[int]:
    """A purpose as SeedSequence spawn-key words: an int as itself, a str as two 32-bit
    words of its SHA-256 (so names and numbers can name streams alike)."""
    if isinstance(purpose, bool):
        raise TypeError("a stream's purpose must be an int >= 0 or a str, got bool")
    if isinstance(purpose, (int, np.integer)):
        if purpose < 0:
            raise ValueError(f"a stream's purpose must be >= 0, got {purpose}")
        return [int(purpose)]
    if isinstance(purpose, str):
        digest = hashlib.sha256(purpose.encode("utf-8")).digest()
        # a marker word keeps the name "1" apart from the number 1
        return [
            2**32 - 1,
            *(int.from_bytes(digest[i : i + 4], "little") for i in (0, 4)),
        ]
    raise TypeError(
        f"a stream's purpose must be an int >= 0 or a str, got {type(purpose).__name__}"
    )


def stream_seed(seed: int, *purpose) -> int:
    """The 62-bit seed of one independent stream of ``seed``: its child ``purpose``.

    ``numpy.random.SeedSequence(seed)`` spawns one child per purpose (a purpose is one or
    more ints >= 0 or strs: ``stream_seed(s, 3)`` is the fourth child of ``s``,
    ``stream_seed(s, "init", 2)`` a grandchild). Unlike ``seed + k``, two streams share no
    seed: seed 0's stream 1 is not seed 1's stream 0, and a chapter's draws at two seeds
    are independent. The result feeds any ``seed=`` argument or :func:`as_generator`.
    """
    _fresh_generator(seed, "cpu")  # validates
    if not purpose:
        raise ValueError("stream_seed needs at least one purpose (an int or a str)")
    key = [w for p in purpose for w in _purpose_words(p)]
    words = np.random.SeedSequence(int(seed), spawn_key=tuple(key)).generate_state(
        2, np.uint32
    )
    return int(words[0]) | (int(words[1]) & 0x3FFFFFFF) << 32


def on_colab() -> bool:
    """True inside a Google Colab runtime."""
    import sys

    return "google.colab" in sys.modules


def describe(device: torch.device | None = None) -> str:
    """A one-line description of the compute device, shown at the top of each chapter."""
    dev = default_device() if device is None else torch.device(device)
    if dev.type == "cuda":
        name = torch.cuda.get_device_name(dev)
        return f"GPU ({name}), torch {torch.__version__}"
    threads = torch.get_num_threads()
    return (
        f"CPU ({os.cpu_count()} cores, {threads} torch thread{'s' if threads > 1 else ''}), "
        f"torch {torch.__version__}"
    )
