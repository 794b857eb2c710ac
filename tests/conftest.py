import pytest
import torch

# unit tests are tiny: one thread is much faster on small CPUs
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _ledger_in_tmp(tmp_path, monkeypatch):
    """Unit tests never write into the book's ledger."""
    monkeypatch.setenv("ATTNBOOK_LEDGER_DIR", str(tmp_path / "ledger"))
    monkeypatch.delenv("ATTNBOOK_DEVICE", raising=False)
    yield
