"""What the first cell of every chapter does.

>>> ch = setup_chapter("foundations/attention-maps", title="Attention maps")  # doctest: +SKIP

sets the figure style, seeds every generator, chooses the device (GPU when there is one,
unless ``$ATTNBOOK_DEVICE`` says otherwise), keeps tiny CPU workloads on one thread (on a
2-core machine each small torch op was many times slower with two threads), prints what it
chose, and opens the chapter's claims ledger.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import torch

from .claims import Ledger
from .device import (
    as_generator,
    default_device,
    describe,
    seed_everything,
    stream_seed,
)
from .plotting import use_style

__all__ = ["Chapter", "chapter_seed", "setup_chapter"]


@dataclass
class Chapter:
    """The chapter's context: its id, device, seed and claims ledger."""

    name: str
    title: str
    device: torch.device
    seed: int
    ledger: Ledger

    def seed_for(self, *purpose) -> int:
        """The seed of the chapter's stream for ``purpose`` (ints >= 0 or strs).

        One ``SeedSequence`` per chapter seed, one spawned child per purpose
        (:func:`attnbook.device.stream_seed`): every purpose gets its own stream, and no
        stream of one chapter seed is a stream of another (``seed + k`` made seed 0's
        stream 1 seed 1's stream 0).
        """
        return stream_seed(self.seed, *purpose)

    def generator(self, purpose=0) -> torch.Generator:
        """A CPU generator on the stream ``seed_for(purpose)`` (CPU draws are the same on
        every machine)."""
        return as_generator(self.seed_for(purpose), "cpu")

    def rng(self, purpose=0) -> np.random.Generator:
        """A NumPy generator on the stream ``seed_for(purpose)``."""
        return as_generator(self.seed_for(purpose), numpy=True)


def chapter_seed(seed: int | None = None) -> int:
    """``seed`` when given, else ``$ATTNBOOK_SEED`` when set, else 0 (a non-negative int)."""
    if seed is None:
        env = os.environ.get("ATTNBOOK_SEED", "").strip()
        if not env:
            return 0
        try:
            seed = int(env)
        except ValueError:
            raise ValueError(
                f"ATTNBOOK_SEED must be a non-negative integer, got {env!r}"
            ) from None
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    return seed


def setup_chapter(
    chapter: str,
    title: str | None = None,
    *,
    seed: int | None = None,
    device=None,
    cpu_threads: int | None = 1,
    quiet: bool = False,
) -> Chapter:
    """Prepare a chapter: style, seeds, device, CPU threads and its claims ledger.

    ``seed``: the chapter's seed. ``None`` (the default) takes it from ``$ATTNBOOK_SEED``
    when that is set, else 0; ``make test-seeds`` executes every chapter under other seeds
    this way, and every claim must hold under each. ``cpu_threads`` (default 1) is applied
    only when the device is the CPU; ``None`` leaves torch's own choice.
    """
    seed = chapter_seed(seed)
    dev = default_device(device)
    seed_everything(seed)
    if dev.type == "cpu" and cpu_threads is not None:
        if (
            isinstance(cpu_threads, bool)
            or not isinstance(cpu_threads, int)
            or cpu_threads < 1
        ):
            raise ValueError(
                f"cpu_threads must be a positive integer or None, got {cpu_threads!r}"
            )
        torch.set_num_threads(cpu_threads)
    use_style()
    ledger = Ledger(chapter, title=title, seed=seed)
    if not quiet:
        print(f"attnbook · {title or chapter}\n{describe(dev)} · seed {seed}")
    return Chapter(
        name=chapter, title=title or chapter, device=dev, seed=seed, ledger=ledger
    )
