"""attnbook.experiments.focus: the Part I sweep points (smoke sizes)."""

import numpy as np
import torch

from attnbook import experiments as E
from attnbook.experiments.focus import sample_ensemble, zipf_gd_ensemble

torch.set_num_threads(1)


def _smoke(name, k=0):
    _, cfg = E.get(name).points("smoke")[k]
    return cfg


def test_sample_ensemble_starts_where_its_reference_starts():
    out = sample_ensemble(_smoke("focus-sample"))
    assert out["loss_sample"].shape == out["loss_pop"].shape
    np.testing.assert_allclose(out["loss_sample"][0], out["loss_pop"][0], atol=1e-5)
    assert np.all(out["error_all"] >= out["error_I_III"])
    assert out["stage_times_sample"].shape == (2, 6)


def test_sample_ensemble_adam_and_zipf_gd():
    out = sample_ensemble(_smoke("focus-sample-iv", 1))
    assert np.all(np.isfinite(out["loss_sample"]))
    z = zipf_gd_ensemble(_smoke("focus-zipf-gd", 1))
    d = 4
    assert z["key_mass"].shape[1:] == (2, d)
    assert z["key_mass"].dtype == np.float32  # stored in single precision (its size)
    np.testing.assert_allclose(z["key_mass"].sum(-1), 1.0, atol=1e-6)


def test_load_archive_finds_results_from_a_subfolder(tmp_path, monkeypatch):
    import pytest

    from attnbook.experiments.focus import load_archive

    monkeypatch.delenv("ATTNBOOK_RESULTS_DIR", raising=False)
    ds = load_archive("focus-delta", start=E.__file__)  # inside the repository
    assert "loss" in ds
    with pytest.raises(FileNotFoundError, match="attnbook run nope"):
        load_archive("nope", start=tmp_path)
    with pytest.raises(TypeError):
        load_archive(3)
