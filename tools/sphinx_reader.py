"""Reader fixes for the HTML book (loaded through ``sphinx.local_extensions`` in _config.yml).

1. Author–year labels in the bibliography, matching the author–year citations.
   sphinxcontrib-bibtex cites in author–year form (``bibtex_reference_style: author_year``)
but labels the bibliography's entries with pybtex's default *alpha* labels ("[CLXL26]"). This
extension registers a pybtex label style that writes "Chen et al., 2026", "Cuturi, 2013",
"Bobkov and Ledoux, 2019" instead (as ``{cite:p}`` prints them), and makes it the book's default
bibliography style.
2. No inline script twice. Extensions that add an inline ``<script>`` after the builder is
   set up (sphinx-thebe's ``const THEBE_JS_URL = ...``, sphinx-togglebutton's selector) get it
   written twice into every page under Sphinx 7.4 (once with filename None, once ""); the second ``const``
   declaration throws "Identifier 'THEBE_JS_URL' has already been declared" in the browser.
   Each page keeps the first copy of every inline script.
"""

from __future__ import annotations

from pybtex.plugin import register_plugin
from pybtex.style.formatting.unsrt import Style as UnsrtStyle
from pybtex.style.labels import BaseLabelStyle

STYLE = "attnbook_authoryear"


def _surname(person) -> str:
    parts = person.prelast_names + person.last_names
    text = " ".join(parts)
    # strip BibTeX braces and the most common accent commands: labels are plain text
    for old, new in (
        ("{", ""),
        ("}", ""),
        ("\\'e", "é"),
        ("\\'a", "á"),
        ("\\c c", "ç"),
    ):
        text = text.replace(old, new)
    return text


def author_year_label(entry) -> str:
    """``"Surname, Year"``, ``"A and B, Year"`` or ``"A et al., Year"`` for a pybtex entry: the
    text of a parenthetical citation."""
    persons = entry.persons.get("author") or entry.persons.get("editor") or []
    names = [_surname(p) for p in persons]
    if not names:
        who = entry.key
    elif len(names) == 1:
        who = names[0]
    elif len(names) == 2:
        who = f"{names[0]} and {names[1]}"
    else:
        who = f"{names[0]} et al."
    return f"{who}, {entry.fields.get('year', 'n.d.')}"


class AuthorYearLabelStyle(BaseLabelStyle):
    """Author–year labels; equal labels get a, b, ... suffixes."""

    def format_labels(self, sorted_entries):
        labels = [author_year_label(e) for e in sorted_entries]
        seen: dict[str, int] = {}
        for label in labels:
            seen[label] = seen.get(label, 0) + 1
        count: dict[str, int] = {}
        for label in labels:
            if seen[label] > 1:
                count[label] = count.get(label, 0) + 1
                yield label + "abcdefghijklmnopqrstuvwxyz"[count[label] - 1]
            else:
                yield label


class AuthorYearStyle(UnsrtStyle):
    """pybtex's unsrt formatting, sorted by author then year, with author–year labels."""

    default_label_style = "attnbook_authoryear"
    default_sorting_style = "author_year_title"


register_plugin("pybtex.style.labels", "attnbook_authoryear", AuthorYearLabelStyle)
register_plugin("pybtex.style.formatting", STYLE, AuthorYearStyle)


def _default_style(app, config):
    if config.bibtex_default_style in (None, "", "alpha"):
        config.bibtex_default_style = STYLE


def _script_key(js):
    attributes = dict(getattr(js, "attributes", {}) or {})
    # an inline script's filename is None or "" depending on who added it
    return (getattr(js, "filename", str(js)) or "", tuple(sorted(attributes.items())))


def _dedupe_inline_scripts(app, pagename, templatename, context, doctree):
    files = context.get("script_files")
    if not isinstance(files, list):
        return
    seen = set()
    keep = []
    for js in files:
        key = _script_key(js)
        if not getattr(js, "filename", None) and key in seen:
            continue
        seen.add(key)
        keep.append(js)
    files[:] = keep


def setup(app):
    app.connect("config-inited", _default_style, priority=900)
    app.connect("html-page-context", _dedupe_inline_scripts, priority=900)
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": True}
