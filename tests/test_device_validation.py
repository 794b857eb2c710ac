import numpy as np
import pytest
import torch

from attnbook import device
from attnbook import validation as v
from attnbook.device import stream_seed
from attnbook.notebook import setup_chapter


def test_default_device_and_override(monkeypatch):
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert device.default_device().type == expected
    monkeypatch.setenv("ATTNBOOK_DEVICE", "cpu")
    assert device.default_device().type == "cpu"
    assert device.default_device("cpu").type == "cpu"
    with pytest.raises(ValueError, match="device"):
        device.default_device("tpu-9000")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            device.default_device("cuda")


def test_as_generator_int_seeds_are_reproducible_and_validated():
    a = torch.randn(5, generator=device.as_generator(3))
    assert torch.equal(a, torch.randn(5, generator=device.as_generator(3)))
    assert not torch.equal(a, torch.randn(5, generator=device.as_generator(4)))
    assert device.as_generator(np.int64(3)).initial_seed() == 3
    for bad in (1.5, "0", True, np.random.default_rng(0)):
        with pytest.raises(TypeError, match="seed"):
            device.as_generator(bad)
        with pytest.raises(TypeError, match="seed"):
            device.as_generator(bad, numpy=True)
    for bad in (-1, -3):
        with pytest.raises(ValueError, match="seed"):
            device.as_generator(bad)
        with pytest.raises(ValueError, match="seed"):
            device.as_generator(bad, numpy=True)
    device.seed_everything(7)
    x = torch.rand(3)
    device.seed_everything(7)
    assert torch.equal(x, torch.rand(3))


def test_as_generator_generators_and_none():
    # a generator on the device asked for is used as is; None is torch's global generator
    g = torch.Generator().manual_seed(2)
    assert device.as_generator(g) is g
    assert device.as_generator(None) is None
    device.seed_everything(11)
    b = torch.randn(4, generator=device.as_generator(None))
    device.seed_everything(11)
    assert torch.equal(b, torch.randn(4))
    torch.manual_seed(123)  # None never silently means 0
    zero = torch.randn(4, generator=device.as_generator(0))
    assert not torch.equal(torch.randn(4, generator=device.as_generator(None)), zero)


def test_as_generator_numpy_streams():
    # an int gives NumPy's own stream for that seed
    np.testing.assert_array_equal(
        device.as_generator(5, numpy=True).normal(size=4),
        np.random.default_rng(5).normal(size=4),
    )
    # a torch.Generator gives a NumPy stream determined by its state, and advances it
    g1, g2 = torch.Generator().manual_seed(9), torch.Generator().manual_seed(9)
    x1 = device.as_generator(g1, numpy=True).normal(size=3)
    np.testing.assert_array_equal(
        x1, device.as_generator(g2, numpy=True).normal(size=3)
    )
    assert not np.array_equal(x1, device.as_generator(g1, numpy=True).normal(size=3))
    # None draws from torch's global generator, which seed_everything seeds
    device.seed_everything(4)
    y = device.as_generator(None, numpy=True).normal(size=3)
    device.seed_everything(4)
    np.testing.assert_array_equal(
        y, device.as_generator(None, numpy=True).normal(size=3)
    )
    device.seed_everything(5)
    assert not np.array_equal(y, device.as_generator(None, numpy=True).normal(size=3))


def test_setup_chapter(monkeypatch, capsys):
    monkeypatch.setenv("ATTNBOOK_DEVICE", "cpu")
    ch = setup_chapter("foundations/attention-maps", title="Attention maps", seed=3)
    assert ch.device.type == "cpu" and ch.ledger.chapter == "foundations/attention-maps"
    assert torch.get_num_threads() == 1 and "CPU" in capsys.readouterr().out
    assert torch.equal(
        torch.rand(2, generator=ch.generator(1)),
        torch.rand(2, generator=torch.Generator().manual_seed(stream_seed(3, 1))),
    )
    np.testing.assert_array_equal(
        ch.rng(2).normal(size=3),
        np.random.default_rng(stream_seed(3, 2)).normal(size=3),
    )
    assert ch.seed_for(1) == stream_seed(3, 1) != ch.seed_for("1")
    with pytest.raises(ValueError, match="cpu_threads"):
        setup_chapter("foundations/attention-maps", cpu_threads=0)


def test_validation_helpers():
    t = v.as_tensor(np.arange(3), "x")
    assert t.is_floating_point()
    assert v.as_tensor([1.0, 2.0], "x").shape == (2,)
    with pytest.raises(TypeError, match="x"):
        v.as_tensor(np.array(["a"], dtype=object), "x")
    with pytest.raises(TypeError, match="y must be real"):
        v.as_tensor(torch.tensor([True]), "y")
    with pytest.raises(TypeError, match="z must be"):
        v.as_tensor({"a": 1}, "z")
    with pytest.raises(ValueError, match="P must be a square"):
        v.check_square(torch.ones(2, 3), "P")
    with pytest.raises(ValueError, match="3x3"):
        v.check_square(torch.ones(2, 2), "P", 3)
    with pytest.raises(ValueError, match="non-finite"):
        v.check_finite(torch.tensor([1.0, float("inf")]), "w")
    with pytest.raises(ValueError, match="n must be >= 1"):
        v.check_positive_int(0, "n")
    with pytest.raises(TypeError, match="n must be an integer"):
        v.check_positive_int(True, "n")
    with pytest.raises(ValueError, match="lr must be positive"):
        v.check_positive(0.0, "lr")
    assert v.check_positive(0.0, "lr", allow_zero=True) == 0.0
    with pytest.raises(ValueError, match="pi must sum to 1"):
        v.check_probability_vector(torch.tensor([0.5, 0.6]), "pi")
    with pytest.raises(ValueError, match="pi must be non-negative"):
        v.check_probability_vector(torch.tensor([1.5, -0.5]), "pi")
    with pytest.raises(ValueError, match="row 1 sums"):
        v.check_stochastic_matrix(torch.tensor([[1.0, 0.0], [0.3, 0.3]]), "P")
    with pytest.raises(ValueError, match="unknown kind"):
        v.check_choice("x", "kind", ("a", "b"))
    with pytest.raises(ValueError, match="at least 2"):
        v.check_ndim(torch.ones(3), "x", 2, at_least=True)


def test_as_generator_seeds_a_generator_on_the_other_device(monkeypatch):
    import attnbook.device as D

    gen = torch.Generator().manual_seed(3)
    assert D.as_generator(gen, "cpu") is gen  # same device: used as is
    assert D.as_generator(None, "cuda") is None
    assert D.as_generator(5, "cpu").initial_seed() == 5
    made = []
    monkeypatch.setattr(
        D, "_fresh_generator", lambda seed, device: made.append((seed, device))
    )
    D.as_generator(torch.Generator().manual_seed(3), "cuda")
    D.as_generator(torch.Generator().manual_seed(3), "cuda")
    D.as_generator(torch.Generator().manual_seed(4), "cuda")
    (s1, d1), (s2, _), (s3, _) = made
    assert (
        s1 == s2 != s3 and 0 <= s1 < 2**62
    )  # deterministic in the CPU generator's state
    assert torch.device(d1).type == "cuda"


def test_stream_seed_is_a_seedsequence_child_and_streams_never_collide():
    # the k-th child NumPy spawns from SeedSequence(seed), independently of our code
    child = np.random.SeedSequence(11).spawn(4)[3]
    w = child.generate_state(2, np.uint32)
    assert stream_seed(11, 3) == int(w[0]) | (int(w[1]) & 0x3FFFFFFF) << 32
    grand = (
        np.random.SeedSequence(11).spawn(3)[2].spawn(6)[5].generate_state(2, np.uint32)
    )
    assert stream_seed(11, 2, 5) == int(grand[0]) | (int(grand[1]) & 0x3FFFFFFF) << 32
    # seed + offset made seed 0's stream 1 seed 1's stream 0; here no two pairs meet
    seeds = {stream_seed(s, k) for s in range(40) for k in range(40)}
    names = {stream_seed(s, name) for s in range(40) for name in ("init", "data", "0")}
    assert len(seeds) == 1600 and len(names) == 120 and not seeds & names
    assert all(0 <= x < 2**62 for x in seeds)


@pytest.mark.parametrize(
    "args, err, match",
    [
        ((-1, 0), ValueError, "non-negative"),
        ((1.5, 0), TypeError, "seed"),
        ((1,), ValueError, "purpose"),
        ((1, -2), ValueError, "purpose"),
        ((1, True), TypeError, "purpose"),
        ((1, 0.5), TypeError, "purpose"),
    ],
)
def test_stream_seed_rejects_bad_input(args, err, match):
    with pytest.raises(err, match=match):
        stream_seed(*args)
