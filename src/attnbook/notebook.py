"""What the first cell of every chapter does.

>>> ch = setup_chapter("foundations/attention-maps", title="Attention maps")  # doctest: +SKIP

sets the figure style, seeds every generator, chooses the device (GPU when there is one,
unless ``$ATTNBOOK_DEVICE`` says otherwise), keeps tiny CPU workloads on one thread (on a
2-core machine each small torch op was many times slower with two threads), prints what it
chose, and opens the chapter's claims ledger.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .claims import Ledger
from .device import default_device, describe, seed_everything
from .plotting import use_style

__all__ = ["Chapter", "setup_chapter"]


@dataclass
class Chapter:
    """The chapter's context: its id, device, seed and claims ledger."""

    name: str
    title: str
    device: torch.device
    seed: int
    ledger: Ledger

    def generator(self, offset: int = 0) -> torch.Generator:
        """A CPU generator seeded with ``seed + offset`` (CPU draws are the same on every machine)."""
        g = torch.Generator()
        g.manual_seed(self.seed + offset)
        return g


def setup_chapter(
    chapter: str,
    title: str | None = None,
    *,
    seed: int = 0,
    device=None,
    cpu_threads: int | None = 1,
    quiet: bool = False,
) -> Chapter:
    """Prepare a chapter: style, seeds, device, CPU threads and its claims ledger.

    ``cpu_threads`` (default 1) is applied only when the device is the CPU; ``None`` leaves
    torch's own choice.
    """
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
    ledger = Ledger(chapter, title=title)
    if not quiet:
        print(f"attnbook · {title or chapter}\n{describe(dev)} · seed {seed}")
    return Chapter(
        name=chapter, title=title or chapter, device=dev, seed=seed, ledger=ledger
    )
