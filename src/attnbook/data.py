r"""Real text for the book: WikiText-2 and TinyStories, word-level, top-``d`` vocabulary.

Where the text comes from, in this order:

1. the folder given as ``data_dir=`` or in the environment variable ``ATTNBOOK_DATA_DIR``;
2. ``../shared/data`` beside the repository (the excerpts the tests use);
3. the book's own excerpts (the splits and sizes the chapters use, a few MB each), downloaded
   from the assets of the book's release and checked against their SHA-256
   (:mod:`attnbook.download`): what a reader on Colab gets;
4. for a split the book has no excerpt of, the Hugging Face hub (``Salesforce/wikitext``,
   config ``wikitext-2-raw-v1``; ``roneneldan/TinyStories``), downloaded into the Hugging Face
   cache — never into this repository — and only when a network is reachable and
   ``huggingface_hub`` is installed.

Set ``ATTNBOOK_OFFLINE=1`` (or ``HF_HUB_OFFLINE=1``) to forbid downloads.

If none works a :class:`DataNotFound` error lists every place looked at and how to fix it.

The local layout (the one of the shared excerpts)::

    <data_dir>/wikitext-2-raw/wiki.{train,valid,test}.raw
    <data_dir>/tinystories/TinyStories-{train,valid}.txt   (or TinyStories-train-head.txt)

Tokenisation is word-level: lower case, words (letters/digits, with inner apostrophes or
hyphens) and every punctuation mark as its own token. The vocabulary keeps the ``d - 1`` most
frequent words and maps the rest to one ``OTHER`` token (id ``d - 1``).
"""

from __future__ import annotations

import os
import re
import socket
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .validation import check_choice, check_positive_int

__all__ = [
    "DataNotFound",
    "DATASETS",
    "OTHER",
    "find_data_dir",
    "load_text",
    "tokenize_words",
    "Corpus",
    "build_corpus",
    "load_corpus",
]

OTHER = "<other>"

#: local file names (first existing wins) and hub locations per (data set, split)
DATASETS = {
    "wikitext-2": {
        "train": (
            ["wikitext-2-raw/wiki.train.raw"],
            "wikitext-2-raw-v1/train-00000-of-00001.parquet",
        ),
        "validation": (
            ["wikitext-2-raw/wiki.valid.raw"],
            "wikitext-2-raw-v1/validation-00000-of-00001.parquet",
        ),
        "test": (
            ["wikitext-2-raw/wiki.test.raw"],
            "wikitext-2-raw-v1/test-00000-of-00001.parquet",
        ),
    },
    "tinystories": {
        "train": (
            [
                "tinystories/TinyStories-train.txt",
                "tinystories/TinyStories-train-head.txt",
            ],
            "TinyStories-train.txt",
        ),
        "validation": (["tinystories/TinyStories-valid.txt"], "TinyStories-valid.txt"),
    },
}
_HUB_REPO = {
    "wikitext-2": "Salesforce/wikitext",
    "tinystories": "roneneldan/TinyStories",
}
_DEFAULT_SPLIT = {"wikitext-2": "validation", "tinystories": "train"}


class DataNotFound(FileNotFoundError):
    """The requested text is neither in a local folder nor downloadable.

    Its message is for a reader: what failed, then what they can do. In a notebook it shows
    alone, without the traceback (the loader's frames give a reader nothing to act on).
    """

    def _render_traceback_(self) -> list[str]:
        # IPython (Jupyter, Colab) shows these lines instead of the traceback
        import textwrap

        text = f"{type(self).__name__}: {self}"
        return [
            wrapped
            for line in text.splitlines()
            for wrapped in (textwrap.wrap(line, width=100) or [""])
        ]


def _repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


def find_data_dir(data_dir=None) -> list[Path]:
    """Candidate local folders, in the order they are tried."""
    out = []
    if data_dir is not None:
        out.append(Path(data_dir))
    env = os.environ.get("ATTNBOOK_DATA_DIR")
    if env:
        out.append(Path(env))
    out.append(_repo_root().parent / "shared" / "data")
    return out


def _offline() -> bool:
    return any(
        os.environ.get(k, "").strip() not in ("", "0")
        for k in ("ATTNBOOK_OFFLINE", "HF_HUB_OFFLINE")
    )


def _network_available(host: str = "huggingface.co", timeout: float = 3.0) -> bool:
    try:
        with socket.create_connection((host, 443), timeout=timeout):
            return True
    except OSError:
        return False


def _download(name: str, split: str) -> str:
    from huggingface_hub import hf_hub_download  # optional: present on Colab

    filename = DATASETS[name][split][1]
    path = hf_hub_download(
        repo_id=_HUB_REPO[name], filename=filename, repo_type="dataset"
    )
    if filename.endswith(".parquet"):
        import pandas as pd  # noqa: F401 - pyarrow/pandas come with Colab

        lines = pd.read_parquet(path)["text"].tolist()
        return "".join(lines)
    return Path(path).read_text(encoding="utf-8")


def _local_text(local_names, data_dir) -> tuple[str | None, list[str]]:
    """``(text, tried)``: the first of ``local_names`` found in the data folders
    (None if none is), and every path looked at, in order."""
    tried = []
    for folder in find_data_dir(data_dir):
        for rel in local_names:
            f = folder / rel
            tried.append(str(f))
            if f.is_file():
                return f.read_text(encoding="utf-8"), tried
    return None, tried


def _why_no_download(download: bool) -> str | None:
    """Why the Hugging Face hub cannot be tried (disabled, not installed, no network),
    or None when it can."""
    if not download:
        return "downloads disabled (download=False)"
    if _offline():
        return "downloads disabled by ATTNBOOK_OFFLINE / HF_HUB_OFFLINE"
    try:
        import huggingface_hub  # noqa: F401
    except ImportError:
        return "huggingface_hub is not installed (pip install huggingface_hub pandas pyarrow)"
    if not _network_available():
        return "no network connection to huggingface.co"
    return None


def load_text(
    name: str, split: str | None = None, *, data_dir=None, download: bool = True
) -> str:
    """The raw text of a data set split (see the module docstring for where it is looked for).

    ``name`` is ``"wikitext-2"`` or ``"tinystories"``; ``split`` ``"train"``, ``"validation"``
    or ``"test"`` (WikiText only); default: WikiText validation, TinyStories train (locally the
    first 2,316 stories if only the excerpt is there).
    """
    name = check_choice(name, "name", tuple(DATASETS))
    split = (
        _DEFAULT_SPLIT[name]
        if split is None
        else check_choice(split, "split", tuple(DATASETS[name]))
    )
    local_names, _ = DATASETS[name][split]
    text, tried = _local_text(local_names, data_dir)
    if text is not None:
        return text
    if download and not _offline():
        from .download import EXCERPTS, excerpt_text

        # nothing local: the book's bounded excerpt (see attnbook.download)
        if (name, split) in EXCERPTS:
            return excerpt_text(name, split)
    reason = _why_no_download(download)
    if reason is None:
        try:
            return _download(name, split)
        except Exception as exc:  # noqa: BLE001 - reported with context below
            reason = f"download failed: {type(exc).__name__}: {exc}"
    raise DataNotFound(
        f"{name} ({split}) not found. Looked for:\n  "
        + "\n  ".join(tried)
        + f"\nand could not download it: {reason}.\nFix: put the files in a folder and set "
        f"ATTNBOOK_DATA_DIR to it (layout: {', '.join(local_names)}), or run where the Hugging "
        f"Face hub is reachable (dataset {_HUB_REPO[name]})."
    )


# words: letters/digits joined by inner apostrophes or hyphens, and numbers with , or . inside
_WORD = re.compile(
    r"[a-z0-9]+(?:(?:['\-]|(?<=[0-9])[,.](?=[0-9]))[a-z0-9]+)*|[^\sa-z0-9]"
)


def tokenize_words(text: str) -> list[str]:
    """Lower-case word-level tokens; punctuation marks are tokens of their own.

    TinyStories' ``<|endoftext|>`` separators are dropped. WikiText's ``@-@``, ``@,@`` and
    ``@.@`` (split hyphens and number separators) are joined: ``1 @,@ 000`` → ``1,000``,
    ``well @-@ known`` → ``well-known``.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a string, got {type(text).__name__}")
    text = text.replace("<|endoftext|>", "\n")  # TinyStories' story separator
    text = text.replace(" @-@ ", "-").replace(" @,@ ", ",").replace(" @.@ ", ".")
    return _WORD.findall(text.lower())


@dataclass
class Corpus:
    """A tokenised text: ``ids`` (int64 tensor), ``vocab`` (id → word, last = OTHER),
    ``freqs`` (unigram frequency per id) and ``other_id``."""

    ids: torch.Tensor
    vocab: list[str]
    freqs: np.ndarray
    name: str = ""

    @property
    def d(self) -> int:
        return len(self.vocab)

    @property
    def other_id(self) -> int:
        return len(self.vocab) - 1

    def masked_other(self) -> torch.Tensor:
        """Boolean mask (d,) that removes OTHER from the attention keys."""
        m = torch.zeros(self.d, dtype=torch.bool)
        m[self.other_id] = True
        return m

    def decode(self, ids) -> list[str]:
        return [self.vocab[int(i)] for i in torch.as_tensor(ids).reshape(-1)]


def build_corpus(tokens: list[str], d: int, *, name: str = "") -> Corpus:
    """Keep the ``d - 1`` most frequent tokens (ties broken alphabetically), map the rest to OTHER."""
    d = check_positive_int(d, "d", minimum=2)
    if not isinstance(tokens, (list, tuple)) or not tokens:
        raise ValueError("tokens must be a non-empty list of strings")
    counts = Counter(tokens)
    if len(counts) < d - 1:
        raise ValueError(
            f"only {len(counts)} distinct tokens: cannot keep d-1 = {d - 1} of them"
        )
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[: d - 1]
    vocab = [w for w, _ in top] + [OTHER]
    index = {w: i for i, w in enumerate(vocab[:-1])}
    ids = torch.tensor([index.get(w, d - 1) for w in tokens], dtype=torch.long)
    freqs = np.bincount(ids.numpy(), minlength=d) / len(tokens)
    return Corpus(ids=ids, vocab=vocab, freqs=freqs, name=name)


def load_corpus(
    name: str,
    d: int,
    *,
    split: str | None = None,
    data_dir=None,
    download: bool = True,
    max_tokens: int | None = None,
) -> Corpus:
    """``build_corpus(tokenize_words(load_text(name, split)), d)``; ``max_tokens`` keeps the first ones."""
    toks = tokenize_words(load_text(name, split, data_dir=data_dir, download=download))
    if max_tokens is not None:
        toks = toks[: check_positive_int(max_tokens, "max_tokens")]
    return build_corpus(toks, d, name=name)
