"""attnbook.flows — the one ODE front-end — against scipy.integrate.solve_ivp (an outside solver)."""

import numpy as np
import pytest
import torch
from scipy.integrate import solve_ivp

from attnbook import errors, flows
from attnbook.flows import BlowUpError, odeint, odeint_dopri5, odeint_rk4

torch.set_num_threads(1)


def _lotka(t, y):
    a, b = y[..., 0], y[..., 1]
    return torch.stack(
        [a - 0.5 * a * b, -b + 0.3 * a * b + 0.1 * torch.sin(t + 0 * a)], -1
    )


def _lotka_np(t, y):
    return _lotka(torch.tensor(t), torch.as_tensor(y)).numpy()


T = np.linspace(0.0, 4.0, 9)
Y0 = torch.tensor([[1.0, 0.5], [2.0, 1.5], [0.3, 2.0]], dtype=torch.float64)


def _reference(y0):
    sol = solve_ivp(_lotka_np, (T[0], T[-1]), y0, t_eval=T, rtol=1e-12, atol=1e-12)
    return sol.y.T


@pytest.mark.parametrize("method", ["rk4", "dopri5"])
def test_batched_solution_matches_solve_ivp(method):
    opts = dict(step_size=1e-3) if method == "rk4" else dict(rtol=1e-10, atol=1e-12)
    traj = odeint(_lotka, Y0, T, method=method, **opts)
    assert traj.shape == (len(T), *Y0.shape)
    for b in range(len(Y0)):
        np.testing.assert_allclose(
            traj[:, b].numpy(), _reference(Y0[b].numpy()), rtol=1e-8, atol=1e-9
        )


def test_rk4_error_is_fourth_order():
    ref = _reference(Y0[0].numpy())[-1]
    errs = [
        np.abs(odeint_rk4(_lotka, Y0[0], T, step_size=h)[-1].numpy() - ref).max()
        for h in (0.1, 0.05)
    ]
    assert 12 < errs[0] / errs[1] < 20  # 2^4 = 16


def test_blowup_convention_is_one_class_with_partial():
    assert flows.BlowUpError is errors.BlowUpError
    assert issubclass(BlowUpError, errors.FlowDiverged)

    def riccati(_t, y):  # y' = y², y(0) = 1: y = 1/(1 - t), singular at t = 1
        return y * y

    t = np.linspace(0, 2, 21)
    for method, opts in (("rk4", dict(step_size=1e-3)), ("dopri5", {})):
        with pytest.raises(BlowUpError) as info:
            odeint(
                riccati, torch.ones(1, dtype=torch.float64), t, method=method, **opts
            )
        err = info.value
        assert 0.99 < err.time <= 1.0 + 1e-3
        assert err.partial.shape == (len(err.times), 1)
        np.testing.assert_allclose(err.times.numpy(), t[: len(err.times)])
        early = err.times.numpy() < 0.9
        np.testing.assert_allclose(
            err.partial[early, 0].numpy(),
            1 / (1 - t[: len(err.times)][early]),
            rtol=1e-6,
        )


def test_nan_is_never_returned():
    def bad(t, y):
        return y * float("nan") if t > 0.3 else y

    with pytest.raises(BlowUpError):
        odeint_rk4(bad, torch.ones(2, dtype=torch.float64), [0.0, 1.0], step_size=0.1)


def test_dopri5_hits_requested_times_and_solve_ivp_final_value():
    def lin(_t, y):
        return -0.7 * y

    t = [0.0, 0.3, 1.1, 2.0]
    out = odeint_dopri5(
        lin, torch.tensor([1.0, -2.0], dtype=torch.float64), t, rtol=1e-10
    )
    sol = solve_ivp(
        lambda _t, y: -0.7 * y, (0, 2), [1.0, -2.0], t_eval=t, rtol=1e-12, atol=1e-14
    )
    np.testing.assert_allclose(out.numpy(), sol.y.T, rtol=1e-7)


@pytest.mark.parametrize(
    "kwargs, err, match",
    [
        (dict(t=[0.0]), ValueError, "t"),
        (dict(t=[1.0, 0.0]), ValueError, "increasing"),
        (dict(step_size=-1.0), ValueError, "step_size"),
        (dict(method="euler"), ValueError, "method"),
    ],
)
def test_bad_arguments(kwargs, err, match):
    args = dict(t=[0.0, 1.0])
    args.update(kwargs)
    t = args.pop("t")
    with pytest.raises(err, match=match):
        odeint(_lotka, Y0, t, **args)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["bdf", "radau", "lsoda"])
def test_stiff_methods_match_the_closed_form_of_a_stiff_system(method):
    # y' = -diag(1e4, 1) (y - cos t·1) has time scales 1e-4 and 1: its closed form is the
    # solution of two scalar linear ODEs
    rates = torch.tensor([1e4, 1.0], dtype=torch.float64)

    def f(t, y):
        return -rates * (y - np.cos(t))

    t = np.array([0.0, 0.5, 1.0, 3.0])
    y0 = torch.tensor([[1.0, 2.0], [0.0, -1.0]], dtype=torch.float64)
    calls = []

    def counted(t_, y):
        calls.append(1)
        return f(t_, y)

    out = odeint(counted, y0, t, method=method, rtol=1e-9, atol=1e-12)
    assert out.shape == (len(t), *y0.shape) and out.dtype == y0.dtype

    def exact(k, c0, tt):  # y' = -k (y - cos t)
        return (
            (c0 - k**2 / (k**2 + 1)) * np.exp(-k * tt)
            + k**2 / (k**2 + 1) * np.cos(tt)
            + k / (k**2 + 1) * np.sin(tt)
        )

    for b in range(2):
        for j, k in enumerate(rates.numpy()):
            np.testing.assert_allclose(
                out[:, b, j].numpy(), exact(k, y0[b, j].item(), t), rtol=1e-6, atol=1e-8
            )
    # the point of a stiff method: an explicit one pays for the fast scale all the way
    n_stiff, calls[:] = len(calls), []
    odeint(counted, y0, t, method="dopri5", rtol=1e-9, atol=1e-12)
    assert n_stiff < len(calls) / 5


@pytest.mark.parametrize("method", ["bdf", "radau", "lsoda"])
def test_stiff_methods_share_the_blowup_convention(method):
    t = np.linspace(0, 2, 21)
    with pytest.raises(BlowUpError) as info:
        odeint(
            lambda _t, y: y * y, torch.ones(1, dtype=torch.float64), t, method=method
        )
    err = info.value
    assert 0.99 < err.time <= 1.0 + 1e-3  # y = 1/(1 - t) reaches 1e8 at 1 - 1e-8
    assert err.partial.shape == (len(err.times), 1)
    early = err.times.numpy() < 0.9
    np.testing.assert_allclose(
        err.partial[early, 0].numpy(), 1 / (1 - t[: len(err.times)][early]), rtol=1e-4
    )


def test_stiff_bad_arguments():
    y0 = torch.ones(2, dtype=torch.float64)
    with pytest.raises(ValueError, match="method"):
        flows.odeint_stiff(lambda t, y: -y, y0, [0.0, 1.0], method="euler")
    with pytest.raises(ValueError, match="jac_sparsity"):
        flows.odeint_stiff(
            lambda t, y: -y, y0, [0.0, 1.0], method="lsoda", jac_sparsity=np.eye(2)
        )
    with pytest.raises(ValueError, match="max_abs"):
        flows.odeint_stiff(lambda t, y: -y, y0, [0.0, 1.0], max_abs=-1.0)


def test_stiff_numpy_rhs_and_exact_jacobian_match_the_tensor_rhs():
    import numpy as np

    from attnbook.flows import odeint

    K = np.array([[-50.0, 1.0], [0.0, -0.5]])  # stiff: rates 50 and 0.5
    y0, t = torch.tensor([1.0, 2.0], dtype=torch.float64), [0.0, 0.5, 2.0]
    a = odeint(lambda _t, y: torch.from_numpy(K) @ y, y0, t, method="bdf")
    b = odeint(lambda _t, y: K @ y, y0, t, method="bdf", numpy_rhs=True)
    c = odeint(
        lambda _t, y: K @ y, y0, t, method="bdf", numpy_rhs=True, jac=lambda *_: K
    )
    np.testing.assert_allclose(
        a.numpy(), b.numpy(), rtol=1e-12
    )  # torch vs NumPy matmul
    exact = np.array([[np.exp(K[1, 1] * s)] for s in t])[:, 0] * 2.0
    np.testing.assert_allclose(c[:, 1].numpy(), exact, rtol=1e-5)
    with pytest.raises(ValueError, match="jac or jac_sparsity"):
        odeint(
            lambda _t, y: K @ y,
            y0,
            t,
            method="bdf",
            jac=lambda *_: K,
            jac_sparsity=np.ones((2, 2)),
        )
    with pytest.raises(TypeError, match="numpy_rhs"):
        odeint(lambda _t, y: K @ y, y0, t, method="bdf", numpy_rhs=1)
