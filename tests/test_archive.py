"""Archived sweeps found locally or downloaded and checked against the packaged SHA-256 index."""

import hashlib
import shutil
from pathlib import Path

import pytest

from attnbook.download import DownloadError
from attnbook.experiments import archive
from tools.colab_test import serve  # the loopback server of make test-colab

ROOT = Path(__file__).resolve().parents[1]


def test_the_packaged_index_matches_results():
    """Stale when an archive changed: run `python -m attnbook.experiments.archive results`."""
    current = {
        folder.name: {
            p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != "README.md"
        }
        for folder in (
            m.parent for m in sorted((ROOT / "results").glob("*/manifest.json"))
        )
    }
    assert archive.archive_index() == current, (
        "results/ changed: run `python -m attnbook.experiments.archive results`"
    )


@pytest.fixture
def away(tmp_path, monkeypatch):
    """No checkout in reach: a working folder outside it, caches in tmp."""
    monkeypatch.delenv(archive.RESULTS_DIR_ENV, raising=False)
    monkeypatch.setenv("ATTNBOOK_CACHE_DIR", str(tmp_path / "cache" / "data"))
    monkeypatch.setattr(archive, "_local", lambda name, start: None)
    return tmp_path


def test_an_archive_is_downloaded_checked_and_loaded(away, monkeypatch):
    name = "pde-fates"
    served = away / "served"
    shutil.copytree(ROOT / "results" / name, served / name)
    with serve(served) as url:
        monkeypatch.setenv(archive.RESULTS_URL_ENV, url)
        ds = archive.load_archive(name, progress=False)
    local = archive.load_archive(name, start=ROOT)
    assert set(ds.data_vars) == set(local.data_vars)
    for var in ds.data_vars:
        assert ds[var].values.tobytes() == local[var].values.tobytes(), var
    assert (away / "cache" / "results" / name / "manifest.json").is_file()


def test_a_damaged_file_is_refused(away, monkeypatch):
    name = "pde-fates"
    served = away / "served"
    shutil.copytree(ROOT / "results" / name, served / name)
    (served / name / "manifest.json").write_text("{}")
    with serve(served) as url:
        monkeypatch.setenv(archive.RESULTS_URL_ENV, url)
        with pytest.raises(DownloadError, match="SHA-256"):
            archive.load_archive(name, progress=False)


def test_unknown_archive_and_bad_name(away):
    with pytest.raises(FileNotFoundError, match="attnbook run nothing-here"):
        archive.load_archive("nothing-here")
    with pytest.raises(TypeError, match="name"):
        archive.load_archive(3)
