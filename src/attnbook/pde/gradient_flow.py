r"""Gradient-flow structure of the Transformer PDE: energy, a Z-weighted metric, Sinkhorn and BW.

**Energy.** :math:`E(\mu) = \tfrac12\iint e^{\langle Ax,y\rangle}d\mu(x)\,d\mu(y)` and
:math:`Z_\mu(x) = \int e^{\langle Ax,y\rangle}d\mu(y)`. For symmetric :math:`A`,
:math:`\delta E/\delta\mu = Z_\mu` and :math:`\nabla_x Z_\mu(x) = A\int e^{\langle Ax,y\rangle}y\,d\mu(y)`,
so the softmax velocity is

.. math:: \Gamma_\mu = S\,\frac{\nabla Z_\mu}{Z_\mu}, \qquad S := VA^{-1}

(for general invertible :math:`A`, :math:`\Gamma_\mu = VA^{-\top}\nabla\log Z_\mu`, the form stated
by Castin et al., 2025).

**A Z-weighted metric (our formulation).** If :math:`S` is symmetric and definite with sign
:math:`s` (:math:`sS \succ 0`), put :math:`g_\mu(v, v) = \int Z_\mu\langle v, (sS)^{-1}v\rangle d\mu`.
Then :math:`\frac{d}{dt}E(\mu_t) = \int\langle\nabla Z_\mu, \Gamma_\mu\rangle d\mu = s\,\|\Gamma_\mu\|_g^2`:
the PDE is formally the gradient flow of :math:`-sE` for :math:`g` (mobility :math:`sS\mu/Z_\mu`),
and :math:`E` is monotone. (The paper's own twisted distance :math:`d_{A,V}` was not available
to us; this is a structure of the same kind, checked numerically.)

**Sinkhorn.** For symmetric :math:`A` and :math:`V = A` the Sinkhorn covariance ODE is the
Bures–Wasserstein gradient flow :math:`\dot\Sigma = -2(\nabla F\,\Sigma + \Sigma\nabla F)` of
:math:`F(\Sigma) = \tfrac12\mathrm{OT}_1(N(0,\Sigma), N(0,\Sigma))` with cost
:math:`-\langle Ax,y\rangle` (a claim of Castin et al., 2025, checked by finite differences).

**Geodesics.** :func:`displacement_interpolation` gives the :math:`W_2` geodesic between two
clouds of equal size; :func:`gaussian_energy` the closed-form energy of a Gaussian.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch

from ..arrays import numpy_in_numpy_out
from ..flows import check_times, odeint
from ..linalg import check_psd, kl_divergence, psd_sqrt
from ..validation import as_tensor, check_finite
from .meanfield import optimal_matching
from .particles import (
    attention_matrix,
    check_cloud,
    interaction_energy,
    particle_masses,
    partition_sums,
    prepare_inputs,
    velocity_field,
)
from .symbolic import sinkhorn_cross_covariance

__all__ = [
    "relative_asymmetry",
    "weighted_field_jacobian_fd",
    "sinkhorn_self_cost_minimised",
    "translation_energies",
    "radial_geodesic_energy",
    "metric_tensor",
    "partition_gradient",
    "twisted_velocity",
    "metric_norm_sq",
    "energy_rate",
    "EnergyBalance",
    "energy_balance",
    "gaussian_energy",
    "displacement_interpolation",
    "sinkhorn_self_cost",
    "sinkhorn_self_cost_particles",
    "symmetric_gradient_fd",
    "bures_wasserstein_rhs",
]


def _square(M, name: str, d: int | None = None) -> torch.Tensor:
    t = check_finite(as_tensor(M, name), name).to(torch.float64)
    if t.dim() != 2 or t.shape[0] != t.shape[1]:
        raise ValueError(f"{name} must be a square matrix, got shape {tuple(t.shape)}")
    if d is not None and t.shape[0] != d:
        raise ValueError(
            f"{name} must be {d}x{d} to match x's dimension, got {tuple(t.shape)}"
        )
    return t


def _symmetric_invertible(A: torch.Tensor, name: str = "A") -> torch.Tensor:
    scale = max(1.0, float(A.abs().max()))
    if float((A - A.T).abs().max()) > 1e-10 * scale:
        raise ValueError(
            f"{name} must be symmetric for the energy structure (δE/δμ = Z needs it)"
        )
    ev = torch.linalg.eigvalsh((A + A.T) / 2)
    if float(ev.abs().min()) <= 1e-12 * scale:
        raise ValueError(
            f"{name} must be invertible, smallest |eigenvalue| {float(ev.abs().min()):.3g}"
        )
    return (A + A.T) / 2


def metric_tensor(A, V) -> tuple[np.ndarray, int]:
    r""":math:`S = VA^{-1}` and its sign :math:`s` (``+1`` or ``-1``) with :math:`sS \succ 0`.

    Raises ``ValueError`` if ``A`` is not symmetric invertible, or :math:`S` is not symmetric
    definite (then the energy :math:`E` need not be monotone).
    """
    At = _symmetric_invertible(_square(A, "A"))
    Vt = _square(V, "V", At.shape[0])
    S = Vt @ torch.linalg.inv(At)
    scale = max(1.0, float(S.abs().max()))
    if float((S - S.T).abs().max()) > 1e-9 * scale:
        raise ValueError("V A^{-1} must be symmetric for the Z-weighted metric")
    ev = torch.linalg.eigvalsh((S + S.T) / 2)
    if float(ev.min()) > 0:
        s = 1
    elif float(ev.max()) < 0:
        s = -1
    else:
        raise ValueError(
            f"V A^{{-1}} must be definite, its eigenvalues span [{float(ev.min()):.3g}, "
            f"{float(ev.max()):.3g}]"
        )
    return ((S + S.T) / 2).numpy(), s


def _cloud(x, weights):
    X = check_cloud(x).to(torch.float64)
    w = particle_masses(X.shape[-2], weights, dtype=X.dtype, device=X.device)
    return X, w


def _cloud_and_velocity(x, v, weights):
    X, w = _cloud(x, weights)
    vt = check_finite(as_tensor(v, "v"), "v").to(X)
    if vt.shape != X.shape:
        raise ValueError(
            f"v must have the shape of x {tuple(X.shape)}, got {tuple(vt.shape)}"
        )
    return X, w, vt


@numpy_in_numpy_out("x")
def partition_gradient(x, *, A, weights=None):
    r""":math:`Z_\mu(x_i)` and :math:`\nabla_x Z_\mu(x_i)` (the measure held fixed), by autograd.

    ``x``: ``(..., n, d)``. Returns ``(Z, gradZ)`` of shapes ``(..., n)`` and ``(..., n, d)``.
    """
    X, w = _cloud(x, weights)
    At = _square(A, "A", X.shape[-1]).to(X.device)
    query = X.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        Z = partition_sums(query, X.detach(), At, w)  # Z(q_i), the measure held fixed
        (gZ,) = torch.autograd.grad(Z.sum(), query)
    Z = Z.detach()
    return Z, gZ


@numpy_in_numpy_out("x")
def twisted_velocity(x, *, A, V, weights=None):
    r"""The velocity written as :math:`S\nabla Z_\mu/Z_\mu`, :math:`S = VA^{-1}` (``A`` symmetric invertible).

    Equal to :func:`attnbook.pde.velocity` with ``kind="softmax"`` — the chapter measures the gap.
    """
    X, _ = _cloud(x, weights)
    At = _symmetric_invertible(_square(A, "A", X.shape[-1]))
    S = _square(V, "V", X.shape[-1]) @ torch.linalg.inv(At)
    Z, gZ = partition_gradient(X, A=At, weights=weights)
    v = (gZ / Z[..., None]) @ S.to(X).T
    return v


@numpy_in_numpy_out("x")
def metric_norm_sq(x, v, *, A, V, weights=None):
    r""":math:`\|v\|_g^2 = \sum_i w_i Z_\mu(x_i)\langle v_i, (sS)^{-1}v_i\rangle`, batched ``(...)``."""
    X, w, vt = _cloud_and_velocity(x, v, weights)
    S, s = metric_tensor(A, V)
    Minv = torch.linalg.inv(torch.as_tensor(s * S)).to(X)
    Z, _ = partition_gradient(X, A=A, weights=weights)
    out = (w * Z * ((vt @ Minv) * vt).sum(-1)).sum(-1)
    return out


@numpy_in_numpy_out("x")
def energy_rate(x, v, *, A, weights=None):
    r""":math:`\frac{d}{dt}E = \sum_i \langle \partial E/\partial x_i, v_i\rangle` by autograd of :math:`E`.

    The chain rule only — no use of the gradient structure, so that it can be compared with
    :math:`s\|v\|_g^2` (:func:`metric_norm_sq`). Batched ``(...)``.
    """
    X, w, vt = _cloud_and_velocity(x, v, weights)
    At = _square(A, "A", X.shape[-1])
    Xg = X.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        E = 0.5 * (partition_sums(Xg, Xg, At, w) * w).sum(-1)
        (gE,) = torch.autograd.grad(E.sum(), Xg)
    out = (gE * vt).sum((-1, -2))
    return out


class EnergyBalance:
    """Energy along a particle trajectory and its predicted change ``s ∫ ‖Γ‖²_g dt``."""

    def __init__(self, t, x, energy, dissipated, sign):
        self.t = t  #: (m,) times
        self.x = x  #: (m, ..., n, d) positions
        self.energy = energy  #: (m, ...) E(μ_n(t))
        self.dissipated = (
            dissipated  #: (m, ...) s ∫_0^t ‖Γ‖²_g, integrated with the positions
        )
        self.sign = sign  #: s

    @property
    def residual(self) -> np.ndarray:
        """``E(t) − E(0) − s∫‖Γ‖²_g`` (zero for an exact gradient structure)."""
        return self.energy - self.energy[0] - self.dissipated


def energy_balance(
    x0, t, *, A, V, step_size: float = 0.01, progress: bool | None = None
) -> EnergyBalance:
    r"""Integrate the softmax particles together with :math:`q(t) = s\int_0^t\|\Gamma\|^2_g`.

    The augmented state :math:`(X, q)` is integrated by RK4 (step ``step_size``), so :math:`q` carries
    the same discretisation as :math:`X`; :math:`E(X(t)) - E(X(0)) - q(t)` then vanishes to
    :math:`O(h^4)` exactly when :math:`dE/dt = s\|\Gamma\|_g^2`. ``x0``: ``(..., n, d)``, uniform masses.
    """
    X0, w = _cloud(x0, None)
    times = check_times(t)
    S, s = metric_tensor(A, V)
    At = _square(A, "A", X0.shape[-1])
    Vt = _square(V, "V", X0.shape[-1])
    Minv = torch.linalg.inv(torch.as_tensor(s * S))
    n, d = X0.shape[-2:]
    # the softmax velocity of pde.velocity (uniform masses), unchecked inside the integrator
    field = velocity_field(
        prepare_inputs(X0, kind="softmax", A=At, V=Vt),
        sphere=False,
        sinkhorn_tol=None,
        n_sinkhorn_iters=2000,
    )

    def rhs(_t, state):
        X = state[..., :-1].reshape(*state.shape[:-1], n, d)
        v = field(X)
        Z = partition_sums(X, X, At, w)
        q = s * (w * Z * ((v @ Minv) * v).sum(-1)).sum(-1)
        return torch.cat([v.reshape(*state.shape[:-1], n * d), q[..., None]], dim=-1)

    state0 = torch.cat(
        [
            X0.reshape(*X0.shape[:-2], n * d),
            torch.zeros(*X0.shape[:-2], 1, dtype=X0.dtype),
        ],
        dim=-1,
    )
    traj = odeint(
        rhs, state0, times, method="rk4", step_size=step_size, progress=progress
    )
    X = traj[..., :-1].reshape(len(times), *X0.shape)
    E = interaction_energy(X, A=At)
    return EnergyBalance(times, X.numpy(), np.asarray(E), traj[..., -1].numpy(), s)


def gaussian_energy(mean, cov, A) -> float:
    r"""Closed-form :math:`E(N(m,\Sigma)) = \tfrac12 E[e^{\langle AX, Y\rangle}]`, :math:`X, Y` i.i.d.

    Conditioning on :math:`X`, then one Gaussian integral with :math:`b = A^\top m`,
    :math:`M = A^\top\Sigma A`, :math:`c = b + Mm`:

    .. math:: E = \tfrac12\det(I - \Sigma M)^{-1/2}
              \exp\!\big(b^\top m + \tfrac12 m^\top M m + \tfrac12 c^\top (I - \Sigma M)^{-1}\Sigma c\big),

    finite iff :math:`I - \Sigma^{1/2}M\Sigma^{1/2} \succ 0`; returns ``inf`` otherwise (the
    integral diverges). For :math:`A = -I`, :math:`\Sigma = \sigma^2 I`:
    :math:`\tfrac12(1-\sigma^4)^{-d/2}e^{-|m|^2/(1+\sigma^2)}`.
    """
    m = np.asarray(mean, float)
    S = np.asarray(cov, float)
    Am = np.asarray(A, float)
    d = m.shape[0] if m.ndim == 1 else -1
    if m.ndim != 1 or S.shape != (d, d) or Am.shape != (d, d):
        raise ValueError(
            f"mean must be (d,), cov and A (d, d); got {m.shape}, {S.shape}, {Am.shape}"
        )
    S = check_psd(S, "cov")
    R = psd_sqrt(S)
    M = Am.T @ S @ Am
    if np.linalg.eigvalsh(np.eye(d) - R @ M @ R).min() <= 0:
        return math.inf
    b, c = Am.T @ m, Am.T @ m + M @ m
    K = np.eye(d) - S @ M
    expo = b @ m + 0.5 * m @ M @ m + 0.5 * c @ np.linalg.solve(K, S @ c)
    return float(0.5 * np.exp(expo) / np.sqrt(np.linalg.det(K)))


def displacement_interpolation(x, y, t):
    r"""The :math:`W_2` geodesic :math:`\mu_t = ((1-t)\,\mathrm{id} + t\,T)_\#\mu_0` between two clouds.

    ``x``, ``y``: ``(n, d)`` clouds of equal masses; :math:`T` is the optimal matching
    (:func:`attnbook.pde.meanfield.optimal_matching`). Returns positions ``(len(t), n, d)``
    (NumPy); ``t`` any values (extrapolation outside [0, 1] is allowed).
    """
    X, Y = np.asarray(x, float), np.asarray(y, float)
    if X.ndim != 2 or X.shape != Y.shape:
        raise ValueError(
            f"x and y must be clouds (n, d) of the same shape, got {X.shape}, {Y.shape}"
        )
    Ym = Y[optimal_matching(X, Y)]
    tt = np.atleast_1d(np.asarray(t, float))
    return X[None] + tt[:, None, None] * (Ym - X)[None]


def sinkhorn_self_cost(cov, A) -> float:
    r""":math:`F(\Sigma) = \tfrac12\mathrm{OT}_1(N(0,\Sigma), N(0,\Sigma))` with cost :math:`-\langle Ax, y\rangle`.

    :math:`\mathrm{OT}_1 = \min_\pi \int -\langle Ax,y\rangle d\pi + \mathrm{KL}(\pi\,|\,\mu\otimes\mu)`.
    The optimal plan is Gaussian with cross-covariance :math:`C` (:math:`C^\top = J_0\Sigma`,
    :func:`attnbook.pde.symbolic.sinkhorn_cross_covariance`); then
    :math:`\int -\langle Ax,y\rangle d\pi = -\operatorname{tr}(AC)` and
    :math:`\mathrm{KL} = -\tfrac12\log\det(I - \Sigma^{-1}C^\top\Sigma^{-1}C)`. Needs :math:`\Sigma \succ 0`.
    """
    S = np.asarray(cov, float)
    Am = np.asarray(A, float)
    if S.ndim != 2 or S.shape[0] != S.shape[1] or Am.shape != S.shape:
        raise ValueError(
            f"cov and A must be square matrices of the same size, got {S.shape}, {Am.shape}"
        )
    S = check_psd(S, "cov", strict=True)
    CT = sinkhorn_cross_covariance(S, Am)
    C = CT.T
    Mx = np.linalg.solve(S, CT) @ np.linalg.solve(S, C)
    sign, logdet = np.linalg.slogdet(np.eye(len(S)) - Mx)
    if sign <= 0:
        raise ValueError(
            "the plan is degenerate (I - Σ⁻¹CᵀΣ⁻¹C is not positive definite)"
        )
    return float(0.5 * (-np.trace(Am @ C) - 0.5 * logdet))


def sinkhorn_self_cost_particles(x, A, *, tol: float = 1e-11) -> float:
    r""":math:`\tfrac12\mathrm{OT}_1(\mu_n,\mu_n)` for a cloud, cost :math:`-\langle Ax,y\rangle` (discrete Sinkhorn).

    With the plan :math:`\pi_{ij} = w_iP_{ij}` of :func:`attnbook.pde.attention_matrix`
    (``kind="sinkhorn"``): :math:`\sum_{ij}\pi_{ij}(-\langle Ax_i,x_j\rangle + \log\frac{\pi_{ij}}{w_iw_j})`.
    Converges to :func:`sinkhorn_self_cost` for Gaussian samples as :math:`n\to\infty`.
    """
    X = check_cloud(x).to(torch.float64)
    if X.dim() != 2:
        raise ValueError(f"x must be one cloud (n, d), got shape {tuple(X.shape)}")
    n = X.shape[0]
    At = _square(A, "A", X.shape[1])
    P = attention_matrix(X, kind="sinkhorn", A=At, sinkhorn_tol=tol)[0]
    pi = P / n
    L = (X @ At.T) @ X.T
    kl = kl_divergence(pi.flatten(), torch.full_like(pi, 1.0 / n**2).flatten())
    return float(0.5 * ((-L * pi).sum() + kl))


def symmetric_gradient_fd(
    f: Callable[[np.ndarray], float], S, h: float = 1e-5
) -> np.ndarray:
    r"""Central finite-difference gradient of ``f`` over symmetric matrices.

    The symmetric :math:`G` with :math:`f(S + H) = f(S) + \operatorname{tr}(GH) + O(|H|^2)` for
    symmetric :math:`H`: :math:`G_{ii} = \partial f/\partial S_{ii}`, and perturbing
    :math:`S_{ij} = S_{ji}` together gives :math:`2G_{ij}`.
    """
    S = np.asarray(S, float)
    if S.ndim != 2 or S.shape[0] != S.shape[1]:
        raise ValueError(f"S must be a square matrix, got shape {S.shape}")
    if not (h > 0):
        raise ValueError("h must be positive")
    d = len(S)
    G = np.zeros_like(S)
    for i in range(d):
        for j in range(i, d):
            H = np.zeros_like(S)
            H[i, j] = H[j, i] = h
            g = (f(S + H) - f(S - H)) / (2 * h)
            G[i, j] = G[j, i] = g if i == j else g / 2
    return G


def bures_wasserstein_rhs(cov, grad) -> np.ndarray:
    r"""The Bures–Wasserstein gradient-flow velocity :math:`-2(G\Sigma + \Sigma G)` for :math:`G = \nabla F(\Sigma)`."""
    S, G = np.asarray(cov, float), np.asarray(grad, float)
    if S.shape != G.shape or S.ndim != 2:
        raise ValueError(
            f"cov and grad must be square matrices of the same shape, got {S.shape}, {G.shape}"
        )
    return -2 * (G @ S + S @ G)


def relative_asymmetry(M) -> float:
    r""":math:`\|M - M^\top\|_F / \|M\|_F` of a square matrix (0 for a symmetric one)."""
    Mn = np.asarray(M, float)
    return float(np.linalg.norm(Mn - Mn.T) / np.linalg.norm(Mn))


def weighted_field_jacobian_fd(x, *, A, V, h: float = 1e-5) -> np.ndarray:
    r"""Jacobian ``(nd, nd)`` of :math:`X \mapsto (Z_\mu(x_i)(sS)^{-1}\Gamma_i)_i` by central differences.

    For symmetric ``A`` with :math:`S = VA^{-1}` definite this field is :math:`s\,n\nabla_X E`,
    a gradient: its Jacobian is symmetric (:func:`relative_asymmetry` ≈ 0).
    """
    from .particles import velocity

    X = np.asarray(x, float)
    n, d = X.shape
    S, s = metric_tensor(A, V)
    Minv = np.linalg.inv(s * S)

    def field(flat):
        y = flat.reshape(n, d)
        Zy = np.asarray(partition_gradient(y, A=A)[0])
        return (Zy[:, None] * velocity(y, kind="softmax", A=A, V=V) @ Minv).reshape(-1)

    flat = X.reshape(-1)
    cols = [
        (field(flat + h * e) - field(flat - h * e)) / (2 * h) for e in np.eye(n * d)
    ]
    return np.stack(cols, axis=1)


def sinkhorn_self_cost_minimised(cov, A) -> float:
    r""":math:`\tfrac12\mathrm{OT}_1` by direct BFGS minimisation over Gaussian plans (any cross-covariance).

    The entropic cost of the plan with marginals :math:`N(0,\Sigma)` and cross-covariance
    :math:`C` is :math:`-\operatorname{tr}(AC) - \tfrac12\log\det(I - \Sigma^{-1}C^\top\Sigma^{-1}C)`;
    an independent check of the closed form :func:`sinkhorn_self_cost`.
    """
    from scipy.optimize import minimize

    S = np.asarray(cov, float)
    Am = np.asarray(A, float)
    d = len(S)
    Si = np.linalg.inv(S)

    def cost(c):
        C = c.reshape(d, d)
        lam = np.linalg.eigvals(
            np.eye(d) - Si @ C.T @ Si @ C
        ).real  # > 0 for a valid plan
        return 1e6 if lam.min() <= 0 else -np.trace(Am @ C) - 0.5 * np.log(lam).sum()

    res = minimize(cost, np.zeros(d * d), method="BFGS", options={"gtol": 1e-10})
    return 0.5 * float(res.fun)


def translation_energies(x, shifts, *, A) -> np.ndarray:
    r""":math:`E(\mu + m e_1)` for each shift ``m`` of ``shifts``: clouds ``x`` ``(..., n, d)``.

    Returns ``(len(shifts), ...)`` (a translation is a W₂ geodesic with constant speed).
    """
    X = np.asarray(x, float)
    e1 = np.zeros(X.shape[-1])
    e1[0] = 1.0
    return np.stack(
        [
            np.asarray(interaction_energy(X + m * e1, A=A))
            for m in np.asarray(shifts, float)
        ]
    )


def radial_geodesic_energy(s, *, h: float = 1e-4) -> tuple[np.ndarray, np.ndarray]:
    r"""One particle, :math:`V = I`, :math:`A = -I`: :math:`E` and :math:`d^2E/ds^2` along a radial
    unit-speed geodesic of the metric :math:`Z(x)|dx|^2 = e^{-|x|^2}|dx|^2`.

    Arc length :math:`s = \int_0^r e^{-\rho^2/2}d\rho = \sqrt{\pi/2}\,\mathrm{erf}(r/\sqrt2)`, so the
    radius is :math:`r(s) = \sqrt2\,\mathrm{erf}^{-1}(s/\sqrt{\pi/2})`; :math:`E` is
    :func:`interaction_energy` of the particle at :math:`(r(s), 0)` and the second derivative
    a central difference of step ``h``. Returns ``(r, d2E/ds2)`` at the arc lengths ``s``.
    """
    from scipy.special import erfinv

    s = np.asarray(s, float)

    def energy(u):
        r = np.sqrt(2) * erfinv(u / np.sqrt(np.pi / 2))
        pts = np.stack([r, np.zeros_like(r)], -1)[..., None, :]
        return np.asarray(interaction_energy(pts, A=-np.eye(2))), r

    (Em, _), (E0, r), (Ep, _) = energy(s - h), energy(s), energy(s + h)
    return r, (Ep - 2 * E0 + Em) / h**2
