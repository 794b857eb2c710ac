import numpy as np
import pytest
import torch

from attnbook import device
from attnbook import validation as v
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


def test_generators_reproducible_and_validated():
    a = torch.randn(5, generator=device.make_generator(3))
    b = torch.randn(5, generator=device.make_generator(3))
    assert torch.equal(a, b)
    g = device.make_generator(1)
    assert device.resolve_generator(generator=g) is g
    with pytest.raises(ValueError, match="either seed or generator"):
        device.resolve_generator(seed=1, generator=g)
    with pytest.raises(TypeError, match="seed"):
        device.make_generator(1.5)
    with pytest.raises(ValueError, match="seed"):
        device.make_generator(-1)
    with pytest.raises(TypeError, match="generator"):
        device.resolve_generator(generator=np.random.default_rng(0))
    device.seed_everything(7)
    x = torch.rand(3)
    device.seed_everything(7)
    assert torch.equal(x, torch.rand(3))


def test_resolve_generator_convention():
    # an int seed: a fresh generator, the same numbers every time
    a = torch.randn(4, generator=device.resolve_generator(5))
    assert torch.equal(a, torch.randn(4, generator=device.resolve_generator(5)))
    # a generator passed as the seed is used as is
    g = device.make_generator(2)
    assert device.resolve_generator(g) is g
    # None is torch's global generator (seeded by seed_everything), never seed 0
    assert device.resolve_generator(None) is torch.default_generator
    device.seed_everything(11)
    b = torch.randn(4, generator=device.resolve_generator(None))
    device.seed_everything(11)
    assert torch.equal(b, torch.randn(4))
    torch.manual_seed(123)
    zero = torch.randn(4, generator=device.make_generator(0))
    assert not torch.equal(torch.randn(4, generator=device.resolve_generator()), zero)
    with pytest.raises(TypeError, match="seed"):
        device.resolve_generator(1.5)
    with pytest.raises(TypeError, match="seed"):
        device.resolve_generator("0")
    with pytest.raises(ValueError, match="seed"):
        device.resolve_generator(-3)
    if torch.cuda.is_available():
        cuda = device.resolve_generator(None, device="cuda")
        assert cuda.device.type == "cuda"


def test_setup_chapter(monkeypatch, capsys):
    monkeypatch.setenv("ATTNBOOK_DEVICE", "cpu")
    ch = setup_chapter("foundations/attention-maps", title="Attention maps", seed=3)
    assert ch.device.type == "cpu" and ch.ledger.chapter == "foundations/attention-maps"
    assert torch.get_num_threads() == 1 and "CPU" in capsys.readouterr().out
    assert torch.equal(
        torch.rand(2, generator=ch.generator(1)),
        torch.rand(2, generator=ch.generator(1)),
    )
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


def test_generator_on_seeds_a_generator_on_the_other_device(monkeypatch):
    import attnbook.device as D

    gen = torch.Generator().manual_seed(3)
    assert D.generator_on(gen, "cpu") is gen  # same device: used as is
    assert D.generator_on(None, "cpu") is None
    assert D.generator_on(5, "cpu").initial_seed() == 5
    made = []
    monkeypatch.setattr(
        D, "make_generator", lambda seed, device: made.append((seed, device))
    )
    D.generator_on(torch.Generator().manual_seed(3), "cuda")
    D.generator_on(torch.Generator().manual_seed(3), "cuda")
    D.generator_on(torch.Generator().manual_seed(4), "cuda")
    (s1, d1), (s2, _), (s3, _) = made
    assert (
        s1 == s2 != s3 and 0 <= s1 < 2**62
    )  # deterministic in the CPU generator's state
    assert torch.device(d1).type == "cuda"
