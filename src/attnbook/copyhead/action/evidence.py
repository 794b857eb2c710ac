r"""The evidence of the copy head with the readout integrated out: exact (Cholesky, per data
set), large-P closed form in the order statistics, Monte Carlo over data sets, and the exact
marginal over the attention scores that SGLD and Adam sample and minimise.

Parameters of the marginal are packed one model per row, ``theta = [vec(G), b]`` (``(n, L²+1)``,
linear attention) or ``vec(G)`` (``(n, L²)``): :func:`pack` turns a parameter dict into that
vector and :func:`unpack` back, as ``pack``/``unpack`` do everywhere in the package.
"""

from __future__ import annotations

import numpy as np
import torch

from attnbook.copyhead.action.numerics import CopyHyper
from attnbook.copyhead.model import (
    attention_matrix,
    data_terms,
    resolve_copy_kind,
    scores_attention,
    token_mse,
)
from attnbook.copyhead.order import order_parameters
from attnbook.copyhead.task import CopyStats, copy_statistics, copy_task
from attnbook.errors import NotPositiveDefinite
from attnbook.validation import (
    as_tensor,
    check_positive_int,
    check_square,
)

__all__ = [
    "attention_statistics",
    "data_action",
    "train_mse_theory",
    "exact_data_action",
    "exact_action",
    "posterior_mean_readout",
    "monte_carlo_data_action",
    "pack",
    "unpack",
    "marginal_potential",
    "theta_attention",
    "readouts",
]


def attention_statistics(A):
    """``(q_F, q_S, m_1, m_2)`` of attention matrices ``A (..., L, L)`` (see module docstring)."""
    A = as_tensor(A, "A")
    check_square(A, "A")
    L = A.shape[-1]
    idx = torch.arange(L, device=A.device)
    rows = A.sum(-1)
    return (
        (A * A).sum((-1, -2)) / L,
        A[..., idx, (idx - 1) % L].sum(-1) / L,
        rows.mean(-1),
        (rows**2).mean(-1),
    )


#: the hyper-parameters of the readout's evidence (the priors of G and b enter elsewhere)
_READOUT = ("kappa", "sigma_w")


def _order_stats(function: str, hyper: dict, n_sequences, q_F, q_S, m_1, m_2):
    """Validated hyper-parameters and the order statistics as tensors of one dtype and device."""
    hp = CopyHyper.from_keywords(
        function, hyper, required=("vocab_size",), optional=_READOUT
    )
    q_F = as_tensor(q_F, "q_F")
    P = as_tensor(n_sequences, "n_sequences", dtype=q_F.dtype, device=q_F.device)
    q_S, m_1, m_2 = (
        as_tensor(t, n, dtype=q_F.dtype, device=q_F.device)
        for t, n in ((q_S, "q_S"), (m_1, "m_1"), (m_2, "m_2"))
    )
    return hp.vocab_size, hp.kappa, hp.sigma_w, P, q_F, q_S, m_1, m_2


def data_action(q_F, q_S, m_1, m_2, *, n_sequences, **hyper) -> torch.Tensor:
    """The large-P data action (module docstring), batched over broadcastable inputs.
    ``hyper``: ``vocab_size`` (required), ``kappa``, ``sigma_w`` (:class:`CopyHyper`)."""
    V, kappa, sigma_w, P, q_F, q_S, m_1, m_2 = _order_stats(
        "data_action", hyper, n_sequences, q_F, q_S, m_1, m_2
    )
    tau = sigma_w**2 * P / (kappa * V)
    return (
        0.5 * V * (V - 1) * torch.log1p(tau * q_F)
        + 0.5 * V * torch.log1p(tau * m_2)
        + P
        / (2 * kappa)
        * (
            1
            - (V - 1) / V * tau * q_S**2 / (1 + tau * q_F)
            - tau * m_1**2 / (V * (1 + tau * m_2))
        )
    )


def train_mse_theory(q_F, q_S, m_1, m_2, *, n_sequences, **hyper) -> torch.Tensor:
    r"""Per-token training MSE of the posterior-mean readout at given statistics (large P):
    :math:`1 - \frac{V-1}{V}\frac{q_S^2(q_F+2/\tau)}{(q_F+1/\tau)^2} - \frac1V\frac{m_1^2(m_2+2/\tau)}{(m_2+1/\tau)^2}`.
    ``hyper``: the keywords of :func:`data_action`."""
    V, kappa, sigma_w, P, q_F, q_S, m_1, m_2 = _order_stats(
        "train_mse_theory", hyper, n_sequences, q_F, q_S, m_1, m_2
    )
    it = kappa * V / (sigma_w**2 * P)  # 1/τ
    return (
        1
        - (V - 1) / V * q_S**2 * (q_F + 2 * it) / (q_F + it) ** 2
        - m_1**2 * (m_2 + 2 * it) / (V * (m_2 + it) ** 2)
    )


def _check_stats(A: torch.Tensor, stats: CopyStats):
    if not isinstance(stats, CopyStats):
        raise TypeError(
            f"stats must be a CopyStats (see copy_statistics), got {type(stats).__name__}"
        )
    if stats.seq_len != A.shape[-1]:
        raise ValueError(
            f"stats are for L={stats.seq_len}, the attention matrix is {A.shape[-1]}x{A.shape[-1]}"
        )


def exact_data_action(
    A, stats: CopyStats, *, kappa: float = 1.0, sigma_w: float = 1.0
) -> torch.Tensor:
    """Exact −log evidence of the targets given attention ``A (..., L, L)``, readout integrated out."""
    A = as_tensor(A, "A")
    check_square(A, "A")
    _check_stats(A, stats)
    hp = CopyHyper(kappa=kappa, sigma_w=sigma_w)
    return _data_action(A, stats, hp.kappa, hp.sigma_w, strict=True)


def _data_action(A, stats: CopyStats, kappa, sigma_w, *, strict: bool) -> torch.Tensor:
    """The body of :func:`exact_data_action`. ``strict=False`` (a sampler's potential) reads
    nothing back to the host: a model whose ``I + λHᵀH`` is not positive definite gets a NaN
    action, which the sampler's divergence check reports, instead of an immediate error."""
    L, V = stats.seq_len, stats.vocab_size
    lam = sigma_w**2 / (kappa * L)
    HH, HY = data_terms(A, stats.to(dtype=A.dtype))
    M = torch.eye(V, dtype=A.dtype, device=A.device) + lam * HH
    chol, info = torch.linalg.cholesky_ex(M)
    logdet = 2 * torch.log(torch.diagonal(chol, dim1=-2, dim2=-1)).sum(-1)
    if strict:
        if bool((info != 0).any()):
            raise NotPositiveDefinite(
                "I + λHᵀH is not positive definite (non-finite attention?)"
            )
    else:
        logdet = torch.where(info == 0, logdet, torch.nan)
    quad = (HY * torch.cholesky_solve(HY, chol)).sum((-1, -2))
    return 0.5 * V * logdet + (stats.yy.to(A.dtype) - lam * quad) / (2 * kappa * L)


def exact_action(
    G,
    stats: CopyStats,
    *,
    kind: str = "linear",
    b=None,
    kappa: float = 1.0,
    sigma_w: float = 1.0,
    sigma_g: float = 1.0,
    sigma_b: float = 1.0,
) -> torch.Tensor:
    r"""Exact :math:`S(G) = -\ln p(G, b\mid\mathcal D)` up to a constant: the readout integrated out,
    plus the priors :math:`\|G\|^2/2\sigma_g^2` (+ :math:`b^2/2\sigma_b^2` for linear attention).
    Batched over ``G (..., L, L)``; ``stats`` broadcast against the batch (one data set per model allowed)."""
    kind = resolve_copy_kind(kind)
    hp = CopyHyper(kappa=kappa, sigma_w=sigma_w, sigma_g=sigma_g, sigma_b=sigma_b)
    G = as_tensor(G, "G")
    A = attention_matrix(G, b if kind == "linear" else None, kind=kind)
    _check_stats(A, stats)
    if kind == "linear" and b is not None:
        b = as_tensor(b, "b", dtype=G.dtype, device=G.device)
    return _action(G, b, A, stats, kind, hp, strict=True)


def _action(G, b, A, stats, kind: str, hp: CopyHyper, *, strict: bool):
    S = _data_action(A, stats, hp.kappa, hp.sigma_w, strict=strict)
    S = S + (G**2).sum((-1, -2)) / (2 * hp.sigma_g**2)
    if kind == "linear" and b is not None:
        S = S + b**2 / (2 * hp.sigma_b**2)
    return S


def posterior_mean_readout(
    A, stats: CopyStats, *, kappa: float = 1.0, sigma_w: float = 1.0
):
    r"""The readout's posterior mean given ``A``: :math:`\bar W = B^\top(K + \kappa L/\sigma_w^2)^{-1}`."""
    A = as_tensor(A, "A")
    _check_stats(A, stats)
    hp = CopyHyper(kappa=kappa, sigma_w=sigma_w)
    L, V = stats.seq_len, stats.vocab_size
    HH, HY = data_terms(A, stats.to(dtype=A.dtype))
    M = HH + (hp.kappa * L / hp.sigma_w**2) * torch.eye(
        V, dtype=A.dtype, device=A.device
    )
    return torch.linalg.solve(M, HY).transpose(-1, -2)


def monte_carlo_data_action(
    A, n_sequences: int, *, n_datasets: int = 64, seed=None, **hyper
):
    """Monte Carlo over data sets: mean and standard error of :func:`exact_data_action` of ``A``
    over ``n_datasets`` independent copy-task data sets (drawn in one batch; ``seed`` an int,
    a generator or ``None``). ``hyper``: the keywords of :func:`data_action`."""
    hp = CopyHyper.from_keywords(
        "monte_carlo_data_action", hyper, required=("vocab_size",), optional=_READOUT
    )
    A = as_tensor(A, "A")
    check_square(A, "A")
    n_ds = check_positive_int(n_datasets, "n_datasets", minimum=2)
    X, Y = copy_task(
        n_sequences,
        A.shape[-1],
        hp.vocab_size,
        batch_shape=(n_ds,),
        seed=seed,
        dtype=A.dtype,
    )
    vals = exact_data_action(
        A.expand(n_ds, *A.shape[-2:]) if A.dim() == 2 else A,
        copy_statistics(X, Y),
        **hp.keywords(*_READOUT),
    )
    return vals.mean(0), vals.std(0) / np.sqrt(n_ds)


def pack(params: dict) -> torch.Tensor:
    """Flatten a parameter dict ``{"G": (n, L, L)[, "b": (n,)]}`` into one row per model,
    ``(n, L² [+ 1])`` (other entries, e.g. a readout ``W``, are not part of the marginal)."""
    if not isinstance(params, dict) or "G" not in params:
        raise TypeError(
            "params must be a dict with 'G' (n, L, L) and optionally 'b' (n,)"
        )
    G = as_tensor(params["G"], "params['G']")
    check_square(G, "params['G']")
    if G.dim() != 3:
        raise ValueError(f"params['G'] must be (n, L, L), got {tuple(G.shape)}")
    flat = G.reshape(G.shape[0], -1)
    if params.get("b") is None:
        return flat
    b = as_tensor(params["b"], "params['b']", dtype=G.dtype, device=G.device)
    if b.shape != G.shape[:1]:
        raise ValueError(f"params['b'] must be ({G.shape[0]},), got {tuple(b.shape)}")
    return torch.cat([flat, b.reshape(-1, 1)], -1)


def unpack(theta, seq_len: int) -> dict:
    """Inverse of :func:`pack`: ``{"G": (..., L, L), "b": (...) or None}`` from ``theta (..., L²
    [+ 1])`` (any leading dims, e.g. ``(n_draws, n_chains)``; ``b`` is None without the last
    column)."""
    L = check_positive_int(seq_len, "seq_len", minimum=2)
    theta = as_tensor(theta, "theta")
    if theta.shape[-1] not in (L * L, L * L + 1):
        raise ValueError(
            f"theta must have L² = {L * L} or L² + 1 columns, got {theta.shape[-1]}"
        )
    G = theta[..., : L * L].reshape(*theta.shape[:-1], L, L)
    return {"G": G, "b": theta[..., L * L] if theta.shape[-1] == L * L + 1 else None}


def theta_attention(theta, seq_len: int, *, kind: str = "linear") -> torch.Tensor:
    """The attention matrices ``(..., L, L)`` of packed parameters (see :func:`unpack`)."""
    p = unpack(theta, seq_len)
    return attention_matrix(p["G"], p["b"], kind=kind)


def readouts(
    theta, stats: CopyStats | None = None, *, kind: str = "linear", **hyper
) -> dict:
    """What the chapters read off packed parameters ``theta (..., L² [+1])``, as NumPy arrays.

    ``m``: the absolute value of the mean row sum of ``A`` (sign-invariant); ``c_1``, ``c_G``: the template coefficients
    (:func:`attnbook.copyhead.order_parameters`), ``c_G`` aligned with the sign of the row sum for
    linear attention (the posterior is even under ``(G, b, W) → −(G, b, W)``), so every entry is
    invariant under that symmetry. With ``stats`` (one data set per row of ``theta``'s last batch
    dim) also ``loss``: the per-token training error of the posterior-mean readout
    (:func:`posterior_mean_readout`; ``hyper`` = ``kappa``, ``sigma_w``).
    """
    kind = resolve_copy_kind(kind)
    theta = as_tensor(theta, "theta")
    L = int(round((theta.shape[-1] - (kind == "linear")) ** 0.5))
    p = unpack(theta, L)
    A = attention_matrix(p["G"], p["b"], kind=kind)
    row = A.sum(-1).mean(-1)
    c1, cG = order_parameters(A)
    sign = torch.sign(row) if kind == "linear" else torch.ones_like(row)
    out = {"m": row.abs(), "c_1": c1 * sign, "c_G": cG * sign}
    if stats is not None:
        batch = A.shape[:-2]
        flat = A.reshape(-1, L, L)
        st = stats.repeat(flat.shape[0] // stats.n_sequences.shape[0])
        W = posterior_mean_readout(flat, st, **hyper)
        b = None if p["b"] is None else p["b"].reshape(-1)
        net = {"G": p["G"].reshape(-1, L, L), "W": W, "b": b}
        if b is None:
            net.pop("b")
        out["loss"] = token_mse(net, st, kind=kind).reshape(batch)
    return {k: v.detach().cpu().numpy() for k, v in out.items()}


def marginal_potential(stats: CopyStats, *, kind: str = "linear", **hyper):
    """``potential(theta) -> (n,)``: :func:`exact_action` of packed ``theta`` (one model per row;
    ``stats`` batched per row or shared) — the target of SGLD and Adam over ``(G, b)``.
    ``hyper``: ``kappa``, ``sigma_w``, ``sigma_g``, ``sigma_b`` (:class:`CopyHyper`)."""
    kind = resolve_copy_kind(kind)
    scales = CopyHyper.from_keywords(
        "marginal_potential", hyper, required=()
    ).keywords()
    if not isinstance(stats, CopyStats):
        raise TypeError("stats must be a CopyStats")
    L = stats.seq_len

    hp = CopyHyper(**scales)

    def potential(theta):  # no host synchronisation: a GPU runs it back to back
        p = unpack(theta, L)
        b = p["b"] if kind == "linear" else None
        A = scores_attention(p["G"], b, kind=kind)
        return _action(p["G"], b, A, stats, kind, hp, strict=False)

    return potential
