"""attnbook.focus.theory: closed forms and SymPy derivations, each checked numerically."""

import numpy as np
import pytest
import sympy as sp
import torch

from attnbook.focus import (
    Params,
    attention_growth_rate,
    condensation_directions,
    condensation_rate,
    init_params,
    population_flow,
    population_gradient,
    population_hessian,
    population_loss,
    saddle_point,
)
from attnbook.focus.metrics import growth_rate_fit
from attnbook.focus.theory import (
    condensation_rate_symbolic_d,
    origin_linearisation,
    reduced_ode,
    reduced_to_params,
    saddle_attention_block,
)
from attnbook.markov import entropy, lazy_chain, perturbed_chain

torch.set_num_threads(1)
PI = torch.tensor([0.75, 0.19, 0.05, 0.01], dtype=torch.float64)


def test_condensation_directions_values_and_batching():
    u, v = condensation_directions(PI.numpy())
    np.testing.assert_allclose(
        u.numpy(), PI.numpy() / np.linalg.norm(PI.numpy()), atol=1e-15
    )
    b = PI.numpy() - 0.25
    np.testing.assert_allclose(v.numpy(), b / np.linalg.norm(b), atol=1e-15)
    U, V = condensation_directions(
        torch.stack([PI, torch.tensor([0.4, 0.3, 0.2, 0.1], dtype=torch.float64)])
    )
    assert U.shape == V.shape == (2, 4)
    np.testing.assert_allclose(U.norm(dim=-1).numpy(), 1.0, atol=1e-15)
    with pytest.raises(ValueError, match="uniform"):
        condensation_directions([0.25] * 4)
    with pytest.raises(ValueError, match="pi"):
        condensation_directions([0.5, 0.6])


def test_attention_growth_rate_reference_value_and_batching():
    assert float(attention_growth_rate(PI, 0.5)) == pytest.approx(
        0.07978470143, rel=1e-9
    )
    lams = np.array([0.0, 0.25, 0.5])
    c = attention_growth_rate(PI, lams)
    np.testing.assert_allclose(c.numpy(), 0.07978470143 * lams / 0.5, rtol=1e-9)
    cb = attention_growth_rate(torch.stack([PI, PI.flip(0)]), 0.5)
    assert cb.shape == (2,) and float(cb[0]) == pytest.approx(float(cb[1]), rel=1e-12)
    assert float(attention_growth_rate([0.25] * 4, 0.5)) == pytest.approx(
        0.0, abs=1e-15
    )
    with pytest.raises(ValueError, match="lam"):
        attention_growth_rate(PI, 1.0)
    with pytest.raises(ValueError, match="positive"):
        attention_growth_rate([0.5, 0.5, 0.0], 0.5)


def test_saddle_point_is_critical_predicts_unigram_and_is_balanced():
    P = lazy_chain(PI, 0.5)
    s = saddle_point(PI, 6, alpha=np.ones(6))
    g = population_gradient(*s, P)
    assert max(float(x.abs().max()) for x in g) < 1e-14
    assert float(population_loss(*s, P)) == pytest.approx(float(entropy(PI)), rel=1e-13)
    assert float(s.W0.norm()) == pytest.approx(float(s.W1.norm()), rel=1e-13)
    with pytest.raises(ValueError, match="alpha"):
        saddle_point(PI, 6, alpha=np.ones(5))


@pytest.mark.parametrize(
    "pi,lam",
    [
        (PI, 0.5),
        (torch.tensor([0.7, 0.12, 0.1, 0.08], dtype=torch.float64), 0.3),
        (torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64), 0.8),
    ],
)
def test_growth_rate_equals_top_jacobian_eigenvalue_at_saddle(pi, lam):
    """The flow's Jacobian -Hess L at the saddle (autograd) has top eigenvalue c."""
    P = lazy_chain(pi, lam)
    H = population_hessian(*saddle_point(pi, 5), P)
    ev = torch.linalg.eigvalsh(-(H + H.T) / 2)
    assert float(ev[-1]) == pytest.approx(
        float(attention_growth_rate(pi, lam)), rel=1e-9
    )


def test_condensation_rate_is_top_jacobian_eigenvalue_at_origin():
    """At the origin the W0/W1 block of -Hess L has eigenvalues +-||pi|| ||b||, eigvec (pi, b)."""
    P = lazy_chain(PI, 0.5)
    d, m = 4, 3
    z = Params(
        torch.zeros(d, m, dtype=torch.float64),
        torch.zeros(m, d, dtype=torch.float64),
        torch.zeros(m, m, dtype=torch.float64),
        torch.zeros(m, m, dtype=torch.float64),
    )
    H = population_hessian(*z, P)
    ev, V = torch.linalg.eigh(-(H + H.T) / 2)
    assert float(ev[-1]) == pytest.approx(float(condensation_rate(PI)), rel=1e-12)
    top = V[:, -1]
    W0 = top[: d * m].reshape(d, m)
    u, v = condensation_directions(PI)
    U, S, _ = torch.linalg.svd(W0)
    assert float(abs(U[:, 0] @ u)) == pytest.approx(1.0, abs=1e-10)
    W1 = top[d * m : 2 * d * m].reshape(m, d)
    _, _, Vt = torch.linalg.svd(W1)
    assert float(abs(Vt[0] @ v)) == pytest.approx(1.0, abs=1e-10)


def test_sympy_origin_linearisation_d3():
    r = origin_linearisation(3)
    diff = (r["grad_M"] - r["grad_M_expected"]).applyfunc(sp.simplify)
    assert diff == sp.zeros(3, 3)
    assert r["grad_Phi"] == sp.zeros(3, 3)
    assert r["residual"] == sp.zeros(6, 1)
    # numerically: dL/dM at M = 0 is dL/dW1 with W0 = I (then M = W1)
    pi_v = np.array([0.6, 0.3, 0.1])
    P = lazy_chain(pi_v, 0.37)
    g = population_gradient(
        torch.eye(3, dtype=torch.float64),
        torch.zeros(3, 3, dtype=torch.float64),
        torch.zeros(3, 3, dtype=torch.float64),
        torch.zeros(3, 3, dtype=torch.float64),
        P,
    )
    pis, lam = r["symbols"]
    f = sp.lambdify((list(pis), lam), r["grad_M"], "numpy")
    np.testing.assert_allclose(
        np.array(f(list(pi_v), 0.37), dtype=float), g.W1.numpy(), atol=1e-14
    )
    rate = float(r["rate"].subs(dict(zip(pis, pi_v))))
    assert rate == pytest.approx(float(condensation_rate(pi_v)), rel=1e-14)


def test_sympy_condensation_rate_symbolic_d():
    r = condensation_rate_symbolic_d()
    d, pi, i = r["d"], r["pi"], r["i"]
    assert sp.simplify(r["norm_b_sq"] - (sp.Sum(pi[i] ** 2, (i, 1, d)) - 1 / d)) == 0
    # evaluate at d = 5 against the numeric closed form
    vals = [0.4, 0.25, 0.15, 0.12, 0.08]
    expr = r["rate"].subs(d, 5).doit()
    expr = expr.subs({pi[k + 1]: v for k, v in enumerate(vals)})
    assert float(expr) == pytest.approx(float(condensation_rate(vals)), rel=1e-14)


def test_sympy_saddle_attention_block_d3_matches_closed_form_and_jacobian():
    r = saddle_attention_block(3)
    pi_v = np.array([0.55, 0.3, 0.15])
    derived, closed = r["numeric"](pi_v, 0.6)
    assert derived == pytest.approx(closed, rel=1e-12)
    assert derived == pytest.approx(float(attention_growth_rate(pi_v, 0.6)), rel=1e-12)
    H = population_hessian(*saddle_point(pi_v, 4), lazy_chain(pi_v, 0.6))
    assert float(torch.linalg.eigvalsh(-(H + H.T) / 2)[-1]) == pytest.approx(
        derived, rel=1e-9
    )
    with pytest.raises(ValueError, match="pi_values"):
        r["numeric"]([0.5, 0.5], 0.5)


def test_saddle_attention_block_precise_agrees_on_the_simplex():
    r = saddle_attention_block(3)
    # seed 42's first draws include a nearly uniform law: float64 disagrees by ~1e-12
    rng = np.random.default_rng(42)
    worst64 = worst = 0.0
    for _ in range(5):
        p3, lam = rng.dirichlet(np.ones(3)), rng.uniform(0.1, 0.9)
        a, b = r["numeric"](p3, lam)
        worst64 = max(worst64, abs(a - b) / b)
        a, b = r["precise"](p3, lam, digits=50)
        worst = max(worst, float(abs((a - b) / b)))
        assert float(a) == pytest.approx(r["numeric"](p3, lam)[0], rel=1e-8)
    assert worst64 > 1e-13 and worst < 1e-30
    with pytest.raises(ValueError, match="digits"):
        r["precise"]([0.5, 0.3, 0.2], 0.5, digits=8)
    with pytest.raises(ValueError, match="pi_values"):
        r["precise"]([0.5, 0.5], 0.5)


@pytest.mark.slow
def test_sympy_reduced_ode_is_the_restricted_full_flow():
    d, m = 3, 4
    red = reduced_ode(d)
    P = perturbed_chain(3, 0.6, 0.05, 0.5)
    rng = np.random.default_rng(0)
    y = rng.normal(size=2 * d + 2)
    a = rng.normal(size=m)
    at = rng.normal(size=m)  # alpha-tilde need not be orthogonal to alpha
    p = reduced_to_params(y, m, alpha=a, alpha_tilde=at)
    assert red["numeric_loss"](y, P) == pytest.approx(
        float(population_loss(*p, P)), rel=1e-12
    )
    g = population_gradient(*p, P)
    dy = red["numeric"](y, P)
    a_u, at_u = a / np.linalg.norm(a), at / np.linalg.norm(at)
    # the full velocity -grad stays on the manifold and has the reduced coordinates dy
    np.testing.assert_allclose(-g.W0.numpy(), np.outer(dy[:d], a_u), atol=1e-12)
    np.testing.assert_allclose(-g.W1.numpy(), np.outer(a_u, dy[d : 2 * d]), atol=1e-12)
    np.testing.assert_allclose(
        -g.WQ.numpy(), dy[2 * d] * np.outer(a_u, at_u), atol=1e-12
    )
    np.testing.assert_allclose(
        -g.WK.numpy(), dy[2 * d + 1] * np.outer(a_u, at_u), atol=1e-12
    )


def test_measured_attention_growth_near_saddle_matches_rate():
    """Start at the saddle plus a tiny attention perturbation: ||Phi||^(1/2) grows like e^{ct}."""
    pi = torch.tensor([0.7, 0.12, 0.1, 0.08], dtype=torch.float64)
    P = lazy_chain(pi, 0.5)
    s = saddle_point(pi, 5)
    noise = init_params(4, 5, eps=1e-5, seed=0)
    start = Params(s.W0, s.W1, noise.WQ, noise.WK)
    te = np.linspace(0, 60, 121)
    res = population_flow(start, P, 60.0, t_eval=te)
    Phi = np.einsum("tdm,tmn,tkn,tek->tde", res.W0, res.WQ, res.WK, res.W0)
    rate, _ = growth_rate_fit(
        res.t, np.sqrt(np.linalg.norm(Phi, axis=(1, 2))), t_min=20, t_max=60
    )
    assert rate == pytest.approx(float(attention_growth_rate(pi, 0.5)), rel=0.01)
