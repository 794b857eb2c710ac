r"""The mean-field limit, measured: distances to the limit, rates, stability constants.

A particle system is an *exact* solution of the Transformer PDE
:math:`\partial_t\mu + \operatorname{div}(\mu\,\Gamma_\mu) = 0` started from the empirical
measure :math:`\mu_n(0)`. So the mean-field error is the initial sampling error propagated by the
stability estimate of Castin et al. (2025),

.. math:: W_2(\mu_n(t), \mu(t)) \le C(t)\, W_2(\mu_n(0), \mu(0)),

and its rate in :math:`n` is the rate of empirical measures. The tools here measure both sides:

* :func:`w2_to_gaussian_1d` — the *exact* :math:`W_2` between a 1-D cloud and a Gaussian,
  through quantile functions: :math:`W_2^2 = \int_0^1 |F_n^{-1}(u) - F^{-1}(u)|^2 du`.
* :func:`gelbrich_distance` — the Bures–Wasserstein distance between the cloud's empirical
  moments and a Gaussian (a lower bound on :math:`W_2`, Gelbrich's bound).
* :func:`w2_particles_batch` — exact OT between many pairs of clouds.
* :func:`fit_rate` — the log–log slope of an error against :math:`n`.
* :func:`particle_jacobian`, :func:`one_sided_lipschitz`, :func:`coupling_distance`,
  :func:`optimal_matching` — the Gronwall side: with the synchronous coupling
  :math:`D(t)^2 = \sum_i w_i |x_i(t) - y_i(t)|^2` of two systems,
  :math:`\dot D \le \Lambda(t) D` where :math:`\Lambda` is the largest eigenvalue of the symmetric
  part of the particle Jacobian (in the :math:`w`-weighted inner product), so
  :math:`W_2(t) \le D(t) \le e^{\int_0^t \Lambda} D(0)`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment
from scipy.stats import norm

from ..arrays import numpy_in_numpy_out
from ..device import as_generator
from ..errors import FlowDiverged
from ..linalg import bures_wasserstein
from ..validation import as_float64_array, as_tensor, check_finite
from .particles import check_cloud, interaction_matrices, prepare_inputs

__all__ = [
    "w2_to_gaussian_1d",
    "gelbrich_distance",
    "w2_particles_batch",
    "RateFit",
    "fit_rate",
    "particle_jacobian",
    "one_sided_lipschitz",
    "coupling_distance",
    "optimal_matching",
    "tangent_distance",
    "sample_disk",
    "two_sample_rates",
]


_numpy = as_float64_array  # tensors, arrays or lists → finite float64 arrays


def w2_to_gaussian_1d(x, mean, var) -> np.ndarray:
    r"""Exact :math:`W_2(\frac1n\sum_i\delta_{x_i}, N(m, s^2))` for 1-D clouds, batched.

    ``x``: ``(..., n)`` or ``(..., n, 1)``; ``mean``, ``var``: scalars or broadcastable to the
    batch ``(...)``. With the sorted cloud :math:`x_{(1)} \le \dots \le x_{(n)}`, the quantile
    coupling gives

    .. math:: W_2^2 = \frac1n\sum_i x_{(i)}^2 - 2\sum_i x_{(i)} I_i + m^2 + s^2,\quad
              I_i = \int_{(i-1)/n}^{i/n} F^{-1}(u)\,du = \frac mn + s\,(\varphi(z_{i-1}) - \varphi(z_i)),

    :math:`z_i = \Phi^{-1}(i/n)` (so :math:`\varphi(z_0) = \varphi(z_n) = 0`).
    """
    X = _numpy(x, "x")
    if X.ndim >= 2 and X.shape[-1] == 1:  # (..., n, 1) -> (..., n)
        X = X[..., 0]
    if X.ndim < 1 or X.shape[-1] < 1:
        raise ValueError(
            f"x must be a 1-D cloud (..., n) or (..., n, 1), got shape {X.shape}"
        )
    m, v = _numpy(mean, "mean"), _numpy(var, "var")
    if np.any(v <= 0):
        raise ValueError("var must be positive")
    n = X.shape[-1]
    z = norm.ppf(np.arange(n + 1) / n)
    phi = norm.pdf(z)
    phi[0] = phi[-1] = 0.0
    Xs = np.sort(X, axis=-1)
    first = m * Xs.mean(-1)
    second = (Xs * (phi[:-1] - phi[1:])).sum(-1) * np.sqrt(v)
    w2sq = (Xs**2).mean(-1) - 2 * (first + second) + m**2 + v
    return np.sqrt(np.maximum(w2sq, 0.0))


def gelbrich_distance(x, mean, cov) -> np.ndarray:
    r"""Bures–Wasserstein distance between the clouds' moments and :math:`N(\text{mean}, \text{cov})`.

    ``x``: ``(..., n, d)``; ``mean`` ``(d,)``, ``cov`` ``(d, d)`` (or batched like ``x``).
    With :math:`\hat m, \hat\Sigma` the empirical mean and (1/n) covariance,
    :math:`G^2 = |\hat m - m|^2 + \operatorname{tr}(\hat\Sigma + \Sigma - 2(\hat\Sigma^{1/2}\Sigma\hat\Sigma^{1/2})^{1/2})`.
    Gelbrich's inequality: :math:`G \le W_2(\mu_n, N(m,\Sigma))`. Returns ``(...)``.
    """
    X = _numpy(x, "x")
    if X.ndim < 2:
        raise ValueError(f"x must be a cloud (..., n, d), got shape {X.shape}")
    d = X.shape[-1]
    m, S = _numpy(mean, "mean"), _numpy(cov, "cov")
    if m.shape[-1:] != (d,) or S.shape[-2:] != (d, d):
        raise ValueError(
            f"mean must be (d,) and cov (d, d) with d = {d}, got {m.shape}, {S.shape}"
        )
    mu = X.mean(-2)
    Z = X - mu[..., None, :]
    C = np.swapaxes(Z, -1, -2) @ Z / X.shape[-2]
    m, S = np.broadcast_to(m, mu.shape), np.broadcast_to(S, C.shape)
    return np.asarray(bures_wasserstein(mu, C, m, S))


def w2_particles_batch(x, y) -> np.ndarray:
    r"""Exact :math:`W_2` between ``x[b]`` and ``y[b]`` for every batch index (uniform masses).

    ``x``: ``(..., n, d)``, ``y``: ``(..., m, d)`` with the same batch shape. Exact OT has no
    batched solver: this loops over the batch with POT's network simplex (``ot.emd2``).
    """
    import ot

    X, Y = _numpy(x, "x"), _numpy(y, "y")
    if (
        X.ndim < 2
        or Y.ndim < 2
        or X.shape[:-2] != Y.shape[:-2]
        or X.shape[-1] != Y.shape[-1]
    ):
        raise ValueError(
            f"x and y must be (..., n, d) and (..., m, d) with the same batch and d, "
            f"got {X.shape} and {Y.shape}"
        )
    batch = X.shape[:-2]
    Xf, Yf = X.reshape(-1, *X.shape[-2:]), Y.reshape(-1, *Y.shape[-2:])
    a, b = np.full(X.shape[-2], 1 / X.shape[-2]), np.full(Y.shape[-2], 1 / Y.shape[-2])
    out = np.array(
        [ot.emd2(a, b, ot.dist(xb, yb), numItermax=1_000_000) for xb, yb in zip(Xf, Yf)]
    )
    return np.sqrt(np.maximum(out, 0.0)).reshape(batch)


@dataclass
class RateFit:
    r"""A power law :math:`\text{error} \approx c\, n^{\text{slope}}` fitted on log–log axes."""

    slope: float  #: fitted exponent
    prefactor: float  #: c
    stderr: float  #: standard error of the slope (least squares; nan with 2 points)
    n: np.ndarray  #: the sizes
    values: np.ndarray  #: the (seed-averaged) errors that were fitted

    def __call__(self, n) -> np.ndarray:
        return self.prefactor * np.asarray(n, float) ** self.slope


def fit_rate(n, values) -> RateFit:
    r"""Least-squares fit of :math:`\log \text{values} = \log c + \text{slope}\cdot\log n`.

    ``values``: ``(len(n),)`` or ``(len(n), seeds)``; with seeds the mean over seeds is fitted.
    """
    N = _numpy(n, "n")
    Y = _numpy(values, "values")
    if N.ndim != 1 or len(N) < 2 or np.any(N <= 0):
        raise ValueError(f"n must be at least two positive sizes, got {N}")
    if Y.shape[0] != len(N) or Y.ndim not in (1, 2):
        raise ValueError(
            f"values must be (len(n),) or (len(n), seeds), got shape {Y.shape}"
        )
    if Y.ndim == 2:
        Y = Y.mean(1)
    if np.any(Y <= 0):
        raise ValueError("values must be positive to be fitted on log-log axes")
    lx, ly = np.log(N), np.log(Y)
    slope, icpt = np.polyfit(lx, ly, 1)
    if len(N) > 2:
        res = ly - (icpt + slope * lx)
        stderr = float(
            np.sqrt(res @ res / (len(N) - 2) / ((lx - lx.mean()) ** 2).sum())
        )
    else:
        stderr = math.nan
    return RateFit(float(slope), float(np.exp(icpt)), stderr, N, Y)


def jackknife_slopes(n, values) -> np.ndarray:
    r"""Jackknife pseudo-values, one per seed, of the exponent that :func:`fit_rate` fits.

    ``values``: ``(len(n), seeds)`` with at least 5 seeds (column ``s`` = seed ``s`` at every
    size). The fitted exponent :math:`\hat\theta` is that of the seed-averaged values; leaving
    seed ``s`` out gives :math:`\hat\theta_{-s}`, and the pseudo-values are
    :math:`S\hat\theta - (S-1)\hat\theta_{-s}`. Their mean and Student-t interval are the
    jackknife estimate of the exponent and its confidence interval (pass them as a claim's
    ``samples``).
    """
    Y = _numpy(values, "values")
    if Y.ndim != 2 or Y.shape[1] < 5:
        raise ValueError(
            f"values must be (len(n), seeds) with at least 5 seeds, got shape {Y.shape}"
        )
    S = Y.shape[1]
    full = fit_rate(n, Y).slope
    loo = np.array([fit_rate(n, np.delete(Y, s, axis=1)).slope for s in range(S)])
    return S * full - (S - 1) * loo


@numpy_in_numpy_out("x")
def particle_jacobian(x, *, kind: str = "softmax", **layer):
    r"""Jacobian of the particle velocity field :math:`X \mapsto (\Gamma_{\mu_X}(x_i))_i`.

    ``x``: ``(n, d)`` or batched ``(..., n, d)``; ``layer``: the keywords of
    :func:`attnbook.pde.velocity` (``A, V, Q, K, heads, causal, weights, bias``). Returns
    ``(..., n d, n d)`` with rows and columns ordered token-major (entry ``(i d + a, j d + b)``
    is :math:`\partial \dot x_{i,a}/\partial x_{j,b}`): the closed form for softmax, else
    automatic differentiation (``torch.func.jacrev``, vectorised over the batch). Sinkhorn is
    excluded (its fixed-point loop is not differentiated here).
    """
    li = prepare_inputs(x, kind=kind, **layer)
    X, p, w, causal = li.X, li.params, li.masses, li.causal
    if p.kind == "sinkhorn":
        raise ValueError("kind 'sinkhorn' is not supported by particle_jacobian")
    n, d = X.shape[-2:]

    def field(flat):
        Y = flat.reshape(n, d)
        P = interaction_matrices(
            Y, p, w, causal=causal, bias=li.bias, uniform=li.uniform
        )
        return ((P @ (Y.unsqueeze(-3) @ p.V.mT)).sum(-3)).reshape(n * d)

    if p.kind == "softmax":
        J = _softmax_jacobian(X, p, w, causal, li.uniform)
    else:
        jac = torch.func.jacrev(field)
        flat = X.reshape(-1, n * d)
        J = torch.func.vmap(jac)(flat).reshape(*X.shape[:-2], n * d, n * d)
    return J


def _softmax_jacobian(X, p, w, causal, uniform) -> torch.Tensor:
    r"""Closed-form Jacobian of the softmax particle field (summed over heads).

    With :math:`P_{ij}` the attention weights, :math:`m_i = \sum_j P_{ij}x_j` and
    :math:`C_i = \sum_j P_{ij}(x_j - m_i)(x_j - m_i)^\top`, differentiating
    :math:`\Gamma_i = \sum_j P_{ij}Vx_j` with scores :math:`\langle Ax_i, x_j\rangle` gives

    .. math:: \frac{\partial\Gamma_i}{\partial x_k} = P_{ik}\,V\big(I + (x_k - m_i)(Ax_i)^\top\big)
              + \delta_{ik}\,V C_i A .

    Memory :math:`O(n^2d^2)` instead of autograd's :math:`O(n^3 d)`.
    """
    n, d = X.shape[-2:]
    P = interaction_matrices(X, p, w, causal=causal, uniform=uniform)  # (..., H, n, n)
    Xh = X.unsqueeze(-3)  # (..., 1, n, d)
    Xk = Xh.unsqueeze(-3)  # (..., 1, 1, n, d)
    m = P @ Xh  # (..., H, n, d)
    AX = Xh @ p.A.mT  # (..., H, n, d): A x_i
    diff = Xk - m.unsqueeze(-2)  # (..., H, i, k, d): x_k - m_i
    I = torch.eye(d, dtype=X.dtype, device=X.device)
    inner = I + diff.unsqueeze(-1) * AX.unsqueeze(-2).unsqueeze(
        -2
    )  # (..., H, i, k, d, d)
    Vh = p.V[:, None, None]  # (H, 1, 1, d, d)
    blocks = P[..., None, None] * (Vh @ inner)  # (..., H, i, k, d, d)
    C = (P.unsqueeze(-1) * Xk).mT @ Xk - m.unsqueeze(-1) * m.unsqueeze(
        -2
    )  # (..., H, n, d, d)
    diag = p.V[:, None] @ C @ p.A[:, None]  # (..., H, n, d, d)
    idx = torch.arange(n, device=X.device)
    blocks = blocks.sum(-5)  # heads add up
    blocks[..., idx, idx, :, :] += diag.sum(-4)
    return blocks.transpose(-3, -2).reshape(*X.shape[:-2], n * d, n * d)


@numpy_in_numpy_out("x")
def one_sided_lipschitz(x, *, weights=None, **params):
    r"""Largest eigenvalue :math:`\Lambda` of the symmetric part of the particle Jacobian.

    In the inner product :math:`\langle X, Y\rangle_w = \sum_i w_i\langle x_i, y_i\rangle`
    (uniform :math:`w_i = 1/n` by default): :math:`\Lambda = \lambda_{\max}\big(\tfrac12(\tilde J +
    \tilde J^\top)\big)` with :math:`\tilde J = W^{1/2} J W^{-1/2}`. Two particle systems coupled
    token by token then satisfy :math:`\tfrac{d}{dt}D \le \Lambda D` to first order in
    :math:`D = |X - Y|_w`. ``params``: as :func:`particle_jacobian`. Returns ``(...)``.
    """
    X = check_cloud(x)
    J = torch.as_tensor(particle_jacobian(X, weights=weights, **params))
    n, d = X.shape[-2:]
    if weights is not None:
        w = check_finite(as_tensor(weights, "weights"), "weights").to(J)
        r = w.sqrt().repeat_interleave(d)
        J = r[:, None] * J / r[None, :]
    lam = torch.linalg.eigvalsh((J + J.mT) / 2)[..., -1]
    return lam


@numpy_in_numpy_out("x")
def coupling_distance(x, y, *, weights=None):
    r"""Token-by-token coupling distance :math:`D = (\sum_i w_i |x_i - y_i|^2)^{1/2}`, batched.

    An upper bound on :math:`W_2` between the two clouds (any pairing is a transport plan),
    with equality when ``y`` is ordered by :func:`optimal_matching`.
    """
    X, Y = check_cloud(x), check_cloud(y, "y")
    if X.shape != Y.shape:
        raise ValueError(
            f"x and y must have the same shape, got {tuple(X.shape)} and {tuple(Y.shape)}"
        )
    n = X.shape[-2]
    w = (
        torch.full((n,), 1.0 / n, dtype=X.dtype)
        if weights is None
        else check_finite(as_tensor(weights, "weights"), "weights").to(X.dtype)
    )
    if w.shape != (n,):
        raise ValueError(f"weights must have shape ({n},), got {tuple(w.shape)}")
    D = (((X - Y.to(X)) ** 2).sum(-1) * w.to(X.device)).sum(-1).sqrt()
    return D


def optimal_matching(x, y) -> np.ndarray:
    r"""Permutation ``perm`` (``(..., n)``) with ``y[..., perm, :]`` optimally matched to ``x``.

    For two clouds of ``n`` equal masses the optimal transport plan is a permutation (Birkhoff);
    it is found by the Hungarian algorithm (:func:`scipy.optimize.linear_sum_assignment`) on the
    squared distances, looping over the batch. Then
    ``coupling_distance(x, y[perm]) == W_2(x, y)``.
    """
    X, Y = _numpy(x, "x"), _numpy(y, "y")
    if X.shape != Y.shape or X.ndim < 2:
        raise ValueError(
            f"x and y must be clouds (..., n, d) of the same shape, got {X.shape}, {Y.shape}"
        )
    Xf, Yf = X.reshape(-1, *X.shape[-2:]), Y.reshape(-1, *Y.shape[-2:])
    perms = []
    for xb, yb in zip(Xf, Yf):
        cost = ((xb[:, None, :] - yb[None, :, :]) ** 2).sum(-1)
        rows, cols = linear_sum_assignment(cost)
        perms.append(cols[np.argsort(rows)])
    return np.stack(perms).reshape(X.shape[:-1])


def tangent_distance(jacobians, t, xi, *, weights=None) -> np.ndarray:
    r"""Linearised coupling distance :math:`|M(t)\xi|_w / |\xi|_w` along a trajectory.

    :math:`M` solves the variational equation :math:`\dot M = J(t)M`, :math:`M(0) = I`, with the
    particle Jacobians ``jacobians`` ``(len(t), ..., nd, nd)`` given at the times ``t``;
    integrated by products of :math:`\exp(\tfrac12(J_k + J_{k+1})\Delta t_k)` (second order in
    the spacing of ``t``). ``xi``: perturbations ``(..., n, d)`` (batched like the Jacobians
    after the time axis, or with extra leading axes). Returns ``(len(t), ...)`` — the
    prediction of :math:`D(t)/D(0)` for an infinitesimal perturbation along ``xi``.
    """
    Jt = torch.as_tensor(np.array(_numpy(jacobians, "jacobians")))
    times = _numpy(t, "t")
    X = torch.as_tensor(_numpy(xi, "xi"))
    n, d = X.shape[-2:]
    if Jt.shape[0] != len(times) or Jt.shape[-1] != n * d:
        raise ValueError(
            f"jacobians must be (len(t), ..., {n * d}, {n * d}), got {tuple(Jt.shape)}"
        )
    w = (
        torch.full((n,), 1.0 / n, dtype=torch.float64)
        if weights is None
        else torch.as_tensor(_numpy(weights, "weights"))
    )
    r = w.sqrt().repeat_interleave(d)
    v = X.reshape(*X.shape[:-2], n * d)
    norm0 = (v * r).norm(dim=-1)
    out = [torch.ones_like(norm0)]
    for k in range(len(times) - 1):
        step = torch.linalg.matrix_exp(
            (Jt[k] + Jt[k + 1]) / 2 * (times[k + 1] - times[k])
        )
        v = (step @ v.unsqueeze(-1)).squeeze(-1)
        out.append((v * r).norm(dim=-1) / norm0)
    return torch.stack(out).numpy()


def sample_disk(n: int, radius: float = 1.0, *, seed=None, batch=()) -> torch.Tensor:
    """``n`` points uniform in the disk of ``radius`` in the plane, shape ``(*batch, n, 2)``.

    ``seed``: int or ``torch.Generator`` (``None``: torch's global generator).
    """
    gen = as_generator(seed)
    r = torch.rand(*batch, n, 1, generator=gen, dtype=torch.float64).sqrt() * radius
    th = 2 * torch.pi * torch.rand(*batch, n, 1, generator=gen, dtype=torch.float64)
    return torch.cat([r * th.cos(), r * th.sin()], -1)


def two_sample_rates(
    d: int,
    ns,
    *,
    n_seeds: int = 8,
    T: float = 1.0,
    seed=None,
    max_log_weight_var: float = 1.0,
):
    r"""Particles at ``T`` against the Gaussian solution in dimension ``d``, for each size in ``ns``.

    Softmax with a random contracting-ish ``A`` and covariance (from ``seed``): returns
    ``(W, G)``, each ``(len(ns), n_seeds)``: the exact two-sample :math:`W_2` between the
    particles and an independent sample of :math:`\mu(T)` of the same size, and the Gelbrich
    distance of the particles' moments to :math:`(\alpha(T), \Sigma(T))`.

    The setting is drawn conditioned on the mean-field regime being reached at these sizes: a
    draw is replaced by the next one from the same stream when its Gaussian solution blows up
    or grows before ``T``, or when the variance of the softmax log-weights
    :math:`s^2(t) = E_x \operatorname{Var}_y\langle Ax, y\rangle
    = \operatorname{tr}(A^\top\Sigma A\Sigma) + \alpha^\top A^\top\Sigma A\alpha`
    (:math:`x, y \sim \mu(t)`) exceeds ``max_log_weight_var`` somewhere on :math:`[0, T]`.
    For log-normal weights the effective sample size of the empirical softmax is
    :math:`n e^{-s^2}`; with :math:`s^2` of several units the particles' normaliser is a
    heavy-tailed sum and the error decays slower than :math:`n^{-1/2}` until
    :math:`n \gg e^{s^2}` — a pre-asymptotic regime, not the rate being measured.
    """
    from .gaussian import gaussian_flow
    from .particles import sample_gaussian, simulate

    rng = as_generator(seed, numpy=True)
    times = np.linspace(0.0, T, 11)
    for _ in range(100):
        B = rng.normal(size=(d, d)) / np.sqrt(d)
        S0 = 0.3 * B @ B.T + 0.2 * np.eye(d)
        A = 0.5 * rng.normal(size=(d, d)) / np.sqrt(d)
        flow = gaussian_flow(np.zeros(d), S0, times, kind="softmax", A=A)
        if flow.blowup_time is not None or flow.grew:
            continue
        ASA = np.einsum("ji,tjk,kl->til", A, flow.cov, A)  # Aᵀ Σ(t) A
        s2 = np.einsum("tij,tji->t", ASA, flow.cov) + np.einsum(
            "ti,tij,tj->t", flow.mean, ASA, flow.mean
        )
        if s2.max() <= max_log_weight_var:
            break
    else:
        raise FlowDiverged(
            "no draw of 100 kept the solution bounded and the softmax log-weight "
            f"variance ≤ {max_log_weight_var} on [0, T]"
        )
    # an int seed keeps its streams (seed + k); a generator or None gives one base draw
    base = (
        int(seed) if isinstance(seed, (int, np.integer)) else int(rng.integers(2**40))
    )
    W, G = np.zeros((len(ns), n_seeds)), np.zeros((len(ns), n_seeds))
    for k, n in enumerate(ns):
        x0 = sample_gaussian(int(n), np.zeros(d), S0, seed=base + k, batch=(n_seeds,))
        xT = simulate(x0, [0.0, T], kind="softmax", A=A, step_size=0.1)[-1]
        ref = sample_gaussian(
            int(n), flow.mean[-1], flow.cov[-1], seed=base + 100 + k, batch=(n_seeds,)
        )
        W[k] = w2_particles_batch(xT, ref)
        G[k] = gelbrich_distance(xT, flow.mean[-1], flow.cov[-1])
    return W, G
