"""attnbook.download: bounded excerpts from a loopback server, checksum, cache, clear errors."""

import hashlib
import http.server
import threading
from pathlib import Path

import pytest

import attnbook.data as data
from attnbook import download as dl

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def server(tmp_path, monkeypatch):
    """A folder served over HTTP on 127.0.0.1; ``requests`` counts the GETs."""
    folder = tmp_path / "served"
    folder.mkdir()
    requests = []

    class Handler(_Quiet):
        def __init__(self, *a, **k):
            super().__init__(*a, directory=str(folder), **k)

        def do_GET(self):
            requests.append(self.path)
            super().do_GET()

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/"
    monkeypatch.setenv(dl.DATA_URL_ENV, url)
    monkeypatch.setenv(dl.CACHE_ENV, str(tmp_path / "cache"))
    yield folder, url, requests
    httpd.shutdown()
    httpd.server_close()


def _excerpt(folder, text="once upon a time .\nthe end .\n", sha=None):
    raw = text.encode()
    ex = dl.Excerpt(
        "tinystories", "train", 3, sha or hashlib.sha256(raw).hexdigest(), 0
    )
    (folder / ex.filename).write_bytes(raw)
    return ex


def test_download_checks_and_caches(server):
    folder, url, requests = server
    ex = _excerpt(folder)
    path = dl.fetch(ex, progress=False)
    assert path.read_text() == "once upon a time .\nthe end .\n"
    assert path.parent == dl.cache_dir() and requests == ["/" + ex.filename]
    assert dl.fetch(ex, progress=False) == path and len(requests) == 1  # cached


def test_bad_checksum_and_missing_file_name_the_url(server):
    folder, url, _ = server
    ex = _excerpt(folder, sha="0" * 64)
    with pytest.raises(dl.DownloadError) as exc:
        dl.fetch(ex, progress=False)
    msg = str(exc.value)
    assert url + ex.filename in msg and "SHA-256" in msg and dl.DATA_URL_ENV in msg
    assert not list(dl.cache_dir().glob("*"))  # nothing half-written kept
    gone = dl.Excerpt("wikitext-2", "validation", 5, "0" * 64, 0)
    with pytest.raises(data.DataNotFound, match="404") as exc:
        dl.fetch(gone, progress=False)
    assert url + gone.filename in str(exc.value) and "ATTNBOOK_DATA_DIR" in str(
        exc.value
    )


def test_unreachable_server_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv(dl.DATA_URL_ENV, "http://127.0.0.1:9/data")
    monkeypatch.setenv(dl.CACHE_ENV, str(tmp_path))
    ex = dl.EXCERPTS[("wikitext-2", "validation")]
    with pytest.raises(dl.DownloadError, match="^Could not download") as exc:
        dl.fetch(ex, progress=False, timeout=5)
    msg = str(exc.value)
    assert f"http://127.0.0.1:9/data/{ex.filename}" in msg
    # a reader first: what failed, then what they can do, the publisher's part last
    failed, reader, publisher = (
        msg.index(ex.filename),
        msg.index("What you can do"),
        msg.index("For the book's publisher"),
    )
    assert failed < reader < publisher and msg.endswith(")")
    assert exc.value.__cause__ is None and exc.value.__suppress_context__


@pytest.mark.slow
def test_download_error_is_one_paragraph_in_a_notebook(tmp_path):
    """In a notebook a failed download shows its message alone, no traceback (IPython's
    ``_render_traceback_``): run one in a kernel against a closed port."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    code = (
        "import os\n"
        f"os.environ['{dl.DATA_URL_ENV}'] = 'http://127.0.0.1:9/data'\n"
        f"os.environ['{dl.CACHE_ENV}'] = {str(tmp_path)!r}\n"
        "from attnbook import download as dl\n"
        "dl.fetch(dl.EXCERPTS[('wikitext-2', 'validation')], progress=False, timeout=5)"
    )
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    client = nbclient.NotebookClient(nb, timeout=120, kernel_name="python3")
    with pytest.raises(nbclient.exceptions.CellExecutionError):
        client.execute()
    (err,) = [o for o in nb.cells[0].outputs if o["output_type"] == "error"]
    shown = "\n".join(err["traceback"])
    assert err["ename"] == "DownloadError"
    assert shown.startswith("DownloadError: Could not download wikitext-2-validation")
    assert "Traceback" not in shown and 'File "' not in shown, shown
    assert len(err["traceback"]) <= 8 and "What you can do" in shown


def test_loader_downloads_the_excerpt_when_nothing_is_local(server, monkeypatch):
    folder, _, requests = server
    ex = _excerpt(folder)
    monkeypatch.delenv("ATTNBOOK_DATA_DIR", raising=False)
    monkeypatch.delenv("ATTNBOOK_OFFLINE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(data, "_repo_root", lambda: folder / "nowhere" / "repo")
    monkeypatch.setitem(dl.EXCERPTS, ("tinystories", "train"), ex)
    corpus = data.load_corpus("tinystories", 3, split="train", max_tokens=3)
    assert corpus.decode(corpus.ids) == ["once", "<other>", "a"]
    assert requests == ["/" + ex.filename]


def test_base_url_defaults_to_the_release(monkeypatch):
    import attnbook

    monkeypatch.delenv(dl.DATA_URL_ENV, raising=False)
    assert dl.base_url() == (
        f"{dl.REPOSITORY}/releases/download/v{attnbook.__version__}/"
    )
    monkeypatch.setenv(dl.DATA_URL_ENV, "http://mirror.example/x")
    assert dl.base_url() == "http://mirror.example/x/"


def test_make_excerpt_keeps_the_first_tokens():
    text = "a b c\nd e, f\n\ng h\n"
    assert dl.make_excerpt(text, 4) == "a b c\nd e, f\n"
    full = data.tokenize_words(text)
    assert data.tokenize_words(dl.make_excerpt(text, 4))[:4] == full[:4]
    assert dl.make_excerpt(text, 100) == text
    with pytest.raises(ValueError, match="max_tokens"):
        dl.make_excerpt(text, 0)


def test_excerpts_are_small():
    for ex in dl.EXCERPTS.values():
        assert 0 < ex.size <= dl.MAX_BYTES and len(ex.sha256) == 64


@pytest.mark.skipif(
    not (SHARED / "tinystories").is_dir(), reason="no local data folder (../shared)"
)
def test_build_excerpts_reproduces_the_checksums(tmp_path):
    written = dl.build_excerpts(tmp_path, data_dir=SHARED)
    for key, path in written.items():
        assert path.stat().st_size == dl.EXCERPTS[key].size
        tokens = data.tokenize_words(path.read_text(encoding="utf-8"))
        assert len(tokens) >= min(dl.EXCERPTS[key].max_tokens, len(tokens))
