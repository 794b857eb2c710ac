"""A small Sphinx extension for the book (loaded by ``sphinx: local_extensions`` in ``_config.yml``).

It reads (and so executes) the claims-ledger page after every other page, so the ledger
shows the claims of the chapters executed in the same build, and it tells the chapters'
kernels that they run under the book build (recorded with each claim). It also registers the
bibliography style ``attnbook_author_year`` (``bibtex_default_style`` in ``_config.yml``): the
entries sorted by author and year and labelled as the text cites them, "Chen et al., 2026",
to match ``bibtex_reference_style: author_year`` ("Chen et al. (2026)" for ``{cite:t}``).
"""

from __future__ import annotations

import os

LEDGER_DOCNAME = "book/reference/claims-ledger"
STYLE = "attnbook_author_year"


def author_year_label(entry) -> str:
    """ "Cuturi, 2013", "Welling and Teh, 2011", "Chen et al., 2026" for a pybtex entry."""
    from pybtex.richtext import Text

    people = entry.persons.get("author") or entry.persons.get("editor") or []
    last = [
        Text.from_latex(" ".join(p.prelast_names + p.last_names)).render_as("text")
        for p in people
    ]
    if len(last) > 2 or (len(last) == 2 and last[1] == "others"):
        names = f"{last[0]} et al."
    else:
        names = " and ".join(last)
    return f"{names}, {entry.fields.get('year', 'n.d.')}"


def author_year_style():
    """The pybtex formatting style of the bibliography: unsrt's entries, author–year labels
    and order."""
    from pybtex.style.formatting.unsrt import Style
    from pybtex.style.labels import BaseLabelStyle
    from pybtex.style.sorting.author_year_title import SortingStyle

    class AuthorYearLabels(BaseLabelStyle):
        def format_labels(self, sorted_entries):
            for entry in sorted_entries:
                yield author_year_label(entry)

    class AuthorYear(Style):
        default_label_style = AuthorYearLabels
        default_sorting_style = SortingStyle

    return AuthorYear


def _ledger_last(app, env, docnames):
    if LEDGER_DOCNAME in docnames:
        docnames.remove(LEDGER_DOCNAME)
        docnames.append(LEDGER_DOCNAME)


def setup(app):
    from pybtex.plugin import register_plugin

    register_plugin("pybtex.style.formatting", STYLE, author_year_style())
    os.environ.setdefault("ATTNBOOK_EXECUTOR", "jupyter-book")
    app.connect("env-before-read-docs", _ledger_last)
    return {"version": "0.1", "parallel_read_safe": False, "parallel_write_safe": True}
