"""attnbook — the package behind the book *How attention learns and behaves*.

Shared modules (``attention``, ``claims``, ``device``, ``validation``, ``plotting``,
``notebook``) serve three theory subpackages: ``attnbook.focus`` (focus and dilution),
``attnbook.copyhead`` (the copy head as a phase transition) and ``attnbook.pde`` (deep
transformers as a mean-field PDE). Subpackages are imported on demand.
"""

__version__ = "0.1.0"


def __getattr__(name):
    # lazy: ``import attnbook`` stays cheap, ``attnbook.setup_chapter`` imports what it needs
    if name == "setup_chapter":
        from .notebook import setup_chapter

        return setup_chapter
    raise AttributeError(f"module 'attnbook' has no attribute {name!r}")
