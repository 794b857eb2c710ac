"""Where tensors live and how random draws are seeded.

``default_device()`` picks CUDA when it is available and CPU otherwise; the environment
variable ``ATTNBOOK_DEVICE`` (e.g. ``cpu``) or an explicit argument overrides it.

Random state: every function in the package that draws random numbers takes ``seed``, an
``int`` or a ``torch.Generator``, and turns it into a generator with
:func:`resolve_generator`. The same int seed gives the same numbers on the CPU; ``seed=None``
means torch's global generator (seeded by :func:`seed_everything`), never silently 0.
"""

from __future__ import annotations

import os
import random

import numpy as np
import torch

__all__ = [
    "default_device",
    "make_generator",
    "seed_everything",
    "resolve_generator",
    "global_generator",
    "as_generator",
    "generator_on",
    "on_colab",
    "describe",
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


def make_generator(
    seed: int, device: str | torch.device | None = "cpu"
) -> torch.Generator:
    """A fresh ``torch.Generator`` on ``device`` seeded with ``seed`` (an int >= 0).

    Raises ``TypeError`` for a non-integer seed and ``ValueError`` for a negative one.
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an integer, got {type(seed).__name__}")
    if seed < 0:
        raise ValueError(f"seed must be non-negative, got {seed}")
    g = torch.Generator(device=torch.device(device) if device is not None else "cpu")
    g.manual_seed(int(seed))
    return g


def global_generator(device: str | torch.device | None = "cpu") -> torch.Generator:
    """Torch's global generator for ``device`` (the one ``torch.manual_seed`` seeds)."""
    dev = torch.device(device if device is not None else "cpu")
    if dev.type == "cuda":
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        return torch.cuda.default_generators[index]
    if dev.type != "cpu":
        raise ValueError(
            f"device {str(dev)!r} has no global generator here; pass an int seed instead"
        )
    return torch.default_generator


def resolve_generator(
    seed: int | torch.Generator | None = None,
    generator: torch.Generator | None = None,
    device: str | torch.device | None = "cpu",
) -> torch.Generator:
    """The generator a function that draws random numbers uses, from its ``seed`` argument.

    The package's convention for random state:

    * ``seed`` an ``int`` (>= 0): a fresh generator on ``device`` seeded with it, so the same
      seed gives the same numbers;
    * ``seed`` a ``torch.Generator``: that generator, used as is (its state advances);
    * ``seed=None``: torch's global generator for ``device`` (:func:`global_generator`), which
      :func:`seed_everything` — and so ``attnbook.setup_chapter`` — seeds. ``None`` never
      silently means 0.

    ``generator`` is the older spelling of a generator argument, still accepted; give at most
    one of ``seed`` and ``generator``. Raises ``TypeError`` for anything else.
    """
    if generator is not None:
        if seed is not None:
            raise ValueError("give either seed or generator, not both")
        if not isinstance(generator, torch.Generator):
            raise TypeError(
                f"generator must be a torch.Generator, got {type(generator).__name__}"
            )
        return generator
    if isinstance(seed, torch.Generator):
        return seed
    if seed is None:
        return global_generator(device)
    return make_generator(seed, device)


def as_generator(seed=None, device: str | torch.device | None = "cpu"):
    """The random-state convention of CONTRIBUTING.md, for torch calls that take
    ``generator=``: ``seed`` an ``int`` (a fresh generator on ``device`` seeded with it), a
    ``torch.Generator`` (used as is) or ``None`` (returns ``None``, so torch draws from its
    global generator, which ``setup_chapter`` seeds; never silently 0)."""
    if seed is None or isinstance(seed, torch.Generator):
        return seed
    return make_generator(seed, device if device is not None else "cpu")


def generator_on(seed, device: str | torch.device | None = "cpu"):
    """:func:`as_generator` for draws made on ``device``: a generator that lives on another
    device (a CPU generator passed to a sampler whose chains are on a GPU) seeds a fresh one on
    ``device`` with one 62-bit draw from it — deterministic given its state, and its stream is
    advanced by that draw only. A generator already on ``device`` is returned as is, so CPU
    numbers do not change."""
    gen = as_generator(seed, device)
    dev = torch.device(device if device is not None else "cpu")
    if gen is None or gen.device.type == dev.type:
        return gen
    child = int(torch.randint(2**62, (1,), generator=gen, device=gen.device))
    return make_generator(child, dev)


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's global generators (for code we do not control)."""
    make_generator(seed)  # validates
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


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
