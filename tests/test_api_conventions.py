"""Common tests over the public API, in the manner of scikit-learn's: the conventions of
CONTRIBUTING.md checked on every exported callable rather than on the ones someone remembered.
"""

import importlib
import inspect
import pkgutil

import numpy as np
import pytest
import torch

import attnbook

# random-state spellings other than ``seed`` that the convention retired
RETIRED_RANDOM_NAMES = ("generator", "rng", "random_state")


def _public_callables():
    """(module, name, callable) for every name in a subpackage's ``__all__`` (methods of
    exported classes included). The experiment configs are records of a run, not API."""
    seen = set()
    for info in pkgutil.walk_packages(attnbook.__path__, "attnbook."):
        if ".experiments" in info.name or info.name.endswith("__main__"):
            continue
        mod = importlib.import_module(info.name)
        for name in getattr(mod, "__all__", ()):
            obj = getattr(mod, name)
            targets = [(name, obj)]
            if inspect.isclass(obj):
                targets = [(f"{name}.__init__", obj.__init__)] + [
                    (f"{name}.{k}", f)
                    for k, f in vars(obj).items()
                    if callable(f) and not k.startswith("_")
                ]
            for label, f in targets:
                if not callable(f) or id(f) in seen:
                    continue
                seen.add(id(f))
                try:
                    sig = inspect.signature(f)
                except (TypeError, ValueError):
                    continue
                yield f"{info.name}.{label}", sig


SIGNATURES = list(_public_callables())


def test_the_walk_finds_the_api():
    # a walk that found nothing would pass every test below
    names = [n for n, _ in SIGNATURES]
    assert len(names) > 300
    assert "attnbook.sgld.sample" in names
    assert "attnbook.attention.attention_weights" in names


@pytest.mark.parametrize(
    "name,sig",
    [(n, s) for n, s in SIGNATURES if "seed" in s.parameters],
    ids=lambda x: x if isinstance(x, str) else "",
)
def test_seed_defaults_to_none_never_to_a_fixed_seed(name, sig):
    default = sig.parameters["seed"].default
    assert default is inspect.Parameter.empty or default is None, (
        f"{name}: seed defaults to {default!r}; None (torch's global generator) is the "
        "convention"
    )


def test_no_second_spelling_of_random_state():
    offenders = [
        (n, p) for n, s in SIGNATURES for p in RETIRED_RANDOM_NAMES if p in s.parameters
    ]
    assert not offenders, offenders


def test_numpy_code_takes_a_torch_generator():
    from attnbook.pde import meanfield, symbolic

    gaps = symbolic.closed_form_gaps(torch.Generator().manual_seed(5), dims=(1, 2))
    assert gaps == symbolic.closed_form_gaps(
        torch.Generator().manual_seed(5), dims=(1, 2)
    )
    assert set(gaps) == {"softmax", "l2", "linear"}
    W, G = meanfield.two_sample_rates(
        2, [8, 16], n_seeds=2, seed=torch.Generator().manual_seed(3)
    )
    W2, _ = meanfield.two_sample_rates(
        2, [8, 16], n_seeds=2, seed=torch.Generator().manual_seed(3)
    )
    np.testing.assert_array_equal(W, W2)
    assert W.shape == G.shape == (2, 2) and np.isfinite(W).all()


def test_focus_explorer_seed_none_is_one_draw_of_the_global_generator():
    from attnbook.focus import explorer

    torch.manual_seed(0)
    a = explorer._int_seed(None)
    torch.manual_seed(0)
    assert explorer._int_seed(None) == a
    assert explorer._int_seed(7) == 7
    with pytest.raises(TypeError, match="seed"):
        explorer._int_seed(1.5)


def test_plot_tables_are_keyed_by_canonical_kinds():
    from attnbook import plotting
    from attnbook.attention import ALL_KINDS, resolve_kind

    for table in (plotting.KIND_COLORS, plotting.KIND_LABELS):
        assert set(ALL_KINDS) <= set(table)
        for key in set(table) - {"causal"}:  # causal: a mask on softmax, not a kind
            assert resolve_kind(key) == key


def test_one_home_for_ode_solvers():
    from pathlib import Path

    src = Path(attnbook.__file__).parent
    outside = [
        p.relative_to(src).as_posix()
        for p in src.rglob("*.py")
        if p.name != "flows.py" and "solve_ivp" in p.read_text(encoding="utf-8")
    ]
    assert not outside, f"call attnbook.flows.odeint instead of solve_ivp: {outside}"


def test_numpy_in_numpy_out():
    from collections import namedtuple

    from attnbook.arrays import numpy_in_numpy_out, to_tensor

    Pair = namedtuple("Pair", "a b")

    @numpy_in_numpy_out("x")
    def f(y, x, *, how="sum"):
        t, _ = to_tensor(x, "x")
        return {"sum": t.sum(), "pair": Pair(t, 2 * t), "list": [t]}[how]

    x = np.arange(3.0)
    s = f(None, x)
    assert isinstance(s, np.float64) and s == 3.0
    p = f(None, x=[0, 1, 2], how="pair")  # a list is NumPy input; ints become float64
    assert isinstance(p, Pair) and p.b.dtype == np.float64
    np.testing.assert_array_equal(p.b, 2 * x)
    assert isinstance(f(None, torch.arange(3.0), how="list")[0], torch.Tensor)
    with pytest.raises(ValueError, match="x"):
        f(None, np.array([1.0, np.nan]))
    with pytest.raises(TypeError, match="'z'"):
        numpy_in_numpy_out("z")(lambda x: x)


def test_integer_input_is_float64_whatever_its_container():
    from attnbook.validation import as_tensor

    for x in ([1, 2], np.array([1, 2]), torch.tensor([1, 2])):
        assert as_tensor(x, "x").dtype == torch.float64
    assert as_tensor(np.array([1, 2]), "x", allow_int=True).dtype == torch.int64


# device defaults other than None, each with its reason (CONTRIBUTING, "Defaults")
DEVICE_DEFAULT_EXCEPTIONS = {
    # a generator is tied to the device of its draws, and CPU and CUDA streams differ: a
    # seed gives the same numbers on every machine only when it draws on the CPU
    "attnbook.device.as_generator": "cpu",
}


@pytest.mark.parametrize(
    "name,sig", [(n, s) for n, s in SIGNATURES if "dtype" in s.parameters]
)
def test_dtype_defaults_to_none_meaning_float64(name, sig):
    assert sig.parameters["dtype"].default is None, (
        f"{name}: dtype={sig.parameters['dtype'].default!r}; the one default is None "
        "(float64, or the input tensor's dtype: attnbook.device.default_dtype)"
    )


@pytest.mark.parametrize(
    "name,sig", [(n, s) for n, s in SIGNATURES if "device" in s.parameters]
)
def test_device_defaults_to_none_meaning_the_input_or_torch_default(name, sig):
    default = sig.parameters["device"].default
    if default is inspect.Parameter.empty:  # a required device (a record of a run)
        return
    assert default == DEVICE_DEFAULT_EXCEPTIONS.get(name), (
        f"{name}: device={default!r}; the one default is None "
        "(the input's device, else torch's default: attnbook.device.resolve_device)"
    )


def test_the_dtype_and_device_rules():
    from attnbook.device import default_dtype, resolve_device

    assert default_dtype() is torch.float64
    assert default_dtype("float32") is torch.float32
    assert (
        default_dtype(None, like=torch.zeros(2, dtype=torch.float32)) is torch.float32
    )
    assert default_dtype(None, like=torch.zeros(2, dtype=torch.long)) is torch.float64
    with pytest.raises(TypeError, match="dtype"):
        default_dtype(torch.long)
    with pytest.raises(ValueError, match="dtype"):
        default_dtype("float16x")
    assert resolve_device() == torch.get_default_device()
    assert resolve_device(None, like=torch.zeros(1)).type == "cpu"
    with pytest.raises(TypeError, match="device"):
        resolve_device(3)
    # defaults follow the rule where they are used: float64 on the CPU, unasked
    from attnbook import attention, focus, pde

    for made in (
        focus.OneLayerTransformer(3, 2, seed=0).W0,
        focus.init_params(3, 2, seed=0).W0,
        pde.sample_gaussian(4, np.zeros(2), np.eye(2), seed=0),
        attention.example_tokens(seed=0),
    ):
        assert made.dtype == torch.float64 and made.device == torch.get_default_device()
