"""attnbook — the package behind the book *How attention learns and behaves*.

Base modules (``validation``, ``linalg``, ``errors``, ``device``, ``results``, ``plotting``)
and shared models (``attention`` and the samplers, trainers and flows) serve three theory
subpackages: ``attnbook.focus`` (focus and dilution), ``attnbook.copyhead`` (the copy head as
a phase transition) and ``attnbook.pde`` (deep transformers as a mean-field PDE). ``claims``
is the book's claims ledger and ``notebook.setup_chapter`` the first cell of every chapter.
Subpackages are imported on demand. The book's build tooling is not part of the package: it
lives in the repository's ``tools/`` folder.
"""

__version__ = "0.1.0"


def __getattr__(name):
    # lazy: ``import attnbook`` stays cheap, ``attnbook.setup_chapter`` imports what it needs
    if name == "setup_chapter":
        from .notebook import setup_chapter

        return setup_chapter
    raise AttributeError(f"module 'attnbook' has no attribute {name!r}")
