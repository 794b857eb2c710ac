"""attnbook.results: dataclasses of arrays to .npz and back, with their info, never pickled."""

from dataclasses import dataclass, field

import numpy as np
import pytest
import torch

from attnbook.results import file_sha256, load_fields, save_fields


@dataclass(frozen=True)
class Run:
    t: np.ndarray
    x: np.ndarray
    wall_s: float
    info: dict = field(default_factory=dict)


def test_round_trip_with_info(tmp_path):
    run = Run(
        t=np.linspace(0, 1, 5),
        x=np.arange(10.0).reshape(5, 2),
        wall_s=0.25,
        info={
            "kind": "softmax",
            "n_steps": 100,
            "lr": 0.01,
            "converged": True,
            "mask": np.array([1, 0, 1]),
            "nested": {"skipped": 1},  # not a plain value: left out
        },
    )
    path = save_fields(run, tmp_path / "run.npz")
    assert path == tmp_path / "run.npz" and path.is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["run.npz"]  # no temporary left
    kw, info = load_fields(Run, path)
    back = Run(info=info, wall_s=float(kw.pop("wall_s")), **kw)
    np.testing.assert_array_equal(back.t, run.t)
    np.testing.assert_array_equal(back.x, run.x)
    assert back.wall_s == 0.25
    assert info["kind"] == "softmax" and isinstance(info["kind"], str)
    assert info["n_steps"] == 100 and isinstance(info["n_steps"], int)
    assert info["lr"] == 0.01 and info["converged"] is True
    np.testing.assert_array_equal(info["mask"], [1, 0, 1])
    assert "nested" not in info


def test_suffix_tensors_and_no_pickle(tmp_path):
    run = Run(t=torch.arange(3.0), x=np.zeros((3, 1)), wall_s=1.0)
    path = save_fields(run, tmp_path / "run")
    assert path.name == "run.npz"
    with np.load(path, allow_pickle=False) as z:
        assert set(z.files) == {"t", "x", "wall_s"}
        np.testing.assert_array_equal(z["t"], [0.0, 1.0, 2.0])


def test_bad_result(tmp_path):
    with pytest.raises(TypeError, match="result must be a dataclass"):
        save_fields({"t": 1}, tmp_path / "x.npz")
    with pytest.raises(TypeError, match="field 'x'"):
        save_fields(Run(t=np.zeros(2), x=[object()], wall_s=0.0), tmp_path / "y.npz")


def test_file_sha256_reads_in_blocks_and_matches_hashlib(tmp_path):
    import hashlib

    data = np.random.default_rng(0).bytes(3 * (1 << 20) + 17)  # several 1 MiB blocks
    path = tmp_path / "blob.bin"
    path.write_bytes(data)
    assert file_sha256(path) == hashlib.sha256(data).hexdigest()
    assert file_sha256(str(path)) == file_sha256(path)
    with pytest.raises(FileNotFoundError):
        file_sha256(tmp_path / "missing")
