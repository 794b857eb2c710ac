"""attnbook.data: the real-text loader (local folder, env var, hub fallback, clear errors)."""

import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

import attnbook.data as data
from attnbook.data import (
    OTHER,
    DataNotFound,
    build_corpus,
    load_corpus,
    load_text,
    tokenize_words,
)

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
needs_shared = pytest.mark.skipif(
    not (SHARED / "wikitext-2-raw" / "wiki.valid.raw").is_file(),
    reason="the shared data excerpts (../shared/data) are not present",
)


def test_tokenize_words():
    assert tokenize_words("The cat, the DOG.") == ["the", "cat", ",", "the", "dog", "."]
    assert tokenize_words("a 1 @,@ 000 @-@ year-old don't") == [
        "a",
        "1,000-year-old",
        "don't",
    ]
    assert tokenize_words("Once.<|endoftext|>Then") == ["once", ".", "then"]
    with pytest.raises(TypeError, match="text"):
        tokenize_words(b"bytes")


def test_build_corpus_vocab_and_other():
    toks = "b a a c a b d e".split()
    c = build_corpus(toks, 3)
    assert c.vocab == ["a", "b", OTHER] and c.d == 3 and c.other_id == 2
    assert c.ids.tolist() == [1, 0, 0, 2, 0, 1, 2, 2]
    np.testing.assert_allclose(c.freqs, [3 / 8, 2 / 8, 3 / 8])
    assert c.decode([0, 2]) == ["a", OTHER]
    assert c.masked_other().tolist() == [False, False, True]
    with pytest.raises(ValueError, match="distinct"):
        build_corpus(["a", "b"], 5)
    with pytest.raises(ValueError, match="tokens"):
        build_corpus([], 3)


def _isolate(monkeypatch, folder):
    monkeypatch.delenv("ATTNBOOK_DATA_DIR", raising=False)
    monkeypatch.setattr(data, "_repo_root", lambda: Path(folder) / "repo")


def test_env_var_folder_is_used(tmp_path, monkeypatch):
    _isolate(monkeypatch, tmp_path)
    (tmp_path / "mine" / "wikitext-2-raw").mkdir(parents=True)
    (tmp_path / "mine" / "wikitext-2-raw" / "wiki.test.raw").write_text(
        " = Title = \n the end . \n"
    )
    monkeypatch.setenv("ATTNBOOK_DATA_DIR", str(tmp_path / "mine"))
    assert "the end" in load_text("wikitext-2", "test")


def test_missing_data_offline_gives_a_clear_error(tmp_path, monkeypatch):
    _isolate(monkeypatch, tmp_path)
    monkeypatch.setenv("ATTNBOOK_OFFLINE", "1")
    with pytest.raises(DataNotFound) as exc:
        load_text("tinystories")
    msg = str(exc.value)
    assert (
        "TinyStories-train" in msg
        and "ATTNBOOK_DATA_DIR" in msg
        and "ATTNBOOK_OFFLINE" in msg
    )
    with pytest.raises(DataNotFound, match="download=False"):
        load_text("wikitext-2", download=False)


def _online_without_local_data(monkeypatch, folder, *, network: bool):
    """No local copy, downloads allowed, a stand-in hub package, and the network up or down."""
    _isolate(monkeypatch, folder)
    monkeypatch.delenv("ATTNBOOK_OFFLINE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setitem(
        sys.modules, "huggingface_hub", types.ModuleType("huggingface_hub")
    )
    monkeypatch.setattr(data, "_network_available", lambda *a, **k: network)


def test_no_network_gives_a_clear_error(tmp_path, monkeypatch):
    _online_without_local_data(monkeypatch, tmp_path, network=False)
    with pytest.raises(DataNotFound, match="no network"):
        load_text("wikitext-2", "train")


def test_downloads_when_nothing_local_and_network(tmp_path, monkeypatch):
    _online_without_local_data(monkeypatch, tmp_path, network=True)
    calls = []
    monkeypatch.setattr(
        data,
        "_download",
        lambda name, split: calls.append((name, split)) or "once upon a time",
    )
    assert load_text("tinystories", "validation") == "once upon a time"
    assert calls == [("tinystories", "validation")]
    assert not any(tmp_path.rglob("*.txt"))  # nothing written locally


def test_bad_names():
    with pytest.raises(ValueError, match="name"):
        load_text("penn-treebank")
    with pytest.raises(ValueError, match="split"):
        load_text("tinystories", "test")


@needs_shared
def test_shared_excerpts_word_frequencies():
    wiki = load_corpus("wikitext-2", 32)
    assert wiki.vocab[:3] == ["the", ",", "."]
    assert 0.06 < wiki.freqs[0] < 0.075
    assert 0.55 < wiki.freqs[-1] < 0.62  # OTHER
    tiny = load_corpus("tinystories", 32)
    assert tiny.vocab[0] == "." and "the" in tiny.vocab[:3]
    assert tiny.ids.dtype == torch.long and int(tiny.ids.max()) == 31
