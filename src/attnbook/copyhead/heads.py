r"""Experiments of Part II as functions: heads trained to the MAP of the marginal over the
attention scores (Adam on the exact action, readout integrated out), SGLD ensembles of the same
marginal, and the small analyses the chapters apply to them (crossings, Landau onsets, slopes,
filtered group means, the measured first-order transition, precursor growth).

"Adam MAP" here always means the MAP of the *marginal* posterior over ``(G, b)`` — the readout
``W`` is integrated out exactly — not a network trained jointly over ``(G, W, b)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from attnbook import train
from attnbook.copyhead.action import (
    exact_action,
    linear_onset_p,
    linear_pooling_moments,
    marginal_potential,
    pack,
    readouts,
    softmax_copy_moments,
    softmax_critical_p,
    softmax_saddle,
)
from attnbook.copyhead.order import pooling_matrix, shift_matrix
from attnbook.copyhead.task import CopyStats
from attnbook.device import as_generator
from attnbook.validation import check_positive, check_positive_int

__all__ = [
    "linear_map_heads",
    "SoftmaxHeads",
    "softmax_map_heads",
    "copy_start",
    "group_mean",
    "level_crossing",
    "landau_onset",
    "loglog_slope",
    "drop_width",
    "gap_crossing",
    "sample_coverage_theory",
    "linear_precursor_growth",
    "softmax_precursor_growth",
]


def _init(n: int, d: int, *, scale: float, seed) -> torch.Tensor:
    gen = as_generator(seed)
    return scale * torch.randn(n, d, generator=gen, dtype=torch.float64)


def linear_map_heads(
    stats: CopyStats,
    *,
    n_restarts: int = 1,
    n_steps: int = 800,
    lr: float = 0.03,
    init_scale: float = 0.3,
    seed=None,
) -> train.TrainHistory:
    """Adam on the exact marginal of linear attention, ``n_restarts`` random starts per data set
    (batch ``[all data sets] × n_restarts``). ``history.params["theta"]`` holds the packed
    ``(G, b)`` (:func:`attnbook.copyhead.action.unpack`); ``final_loss`` the final action."""
    n = stats.n_sequences.shape[0] * check_positive_int(n_restarts, "n_restarts")
    L = stats.seq_len
    pot = marginal_potential(stats.repeat(n_restarts))
    theta0 = _init(
        n, L * L + 1, scale=check_positive(init_scale, "init_scale"), seed=seed
    )

    def action(p):
        return pot(p["theta"])

    return train.adam(action, {"theta": theta0}, n_steps=n_steps, lr=lr)


@dataclass(frozen=True)
class SoftmaxHeads:
    """Softmax heads from a cold start (near ``G = 0``) and a hot start (near the copy head),
    arrays ``(2, n_data_sets)`` (row 0 cold, row 1 hot); ``keep`` marks the runs that reached
    their data set's lowest action (the global-minimum filter)."""

    action: np.ndarray
    a_G: np.ndarray
    loss: np.ndarray
    keep: np.ndarray
    wall_s: float

    @property
    def a_G_global(self) -> np.ndarray:
        """``a_G`` of the deeper of the two runs, per data set."""
        return np.where(self.action[0] <= self.action[1], self.a_G[0], self.a_G[1])

    @property
    def loss_global(self) -> np.ndarray:
        """Training loss of the deeper of the two runs, per data set."""
        return np.where(self.action[0] <= self.action[1], self.loss[0], self.loss[1])


def softmax_map_heads(
    stats: CopyStats,
    *,
    n_steps: int = 600,
    lr: float = 0.05,
    init_scale: float = 0.1,
    seed=None,
    rtol: float = 1e-6,
) -> SoftmaxHeads:
    """Adam on the exact softmax marginal from two starts per data set: ``G0`` (cold) and
    ``G0 + ln L (S − J/L)`` (hot, the copy head); ``G0`` random with ``init_scale``."""
    n, L = stats.n_sequences.shape[0], stats.seq_len
    G0 = _init(n, L * L, scale=init_scale, seed=seed).reshape(n, L, L)
    hot = np.log(L) * (shift_matrix(L) - pooling_matrix(L))
    both = stats.repeat(2)

    def action(p):
        return exact_action(p["G"], both, kind="softmax")

    h = train.adam(action, {"G": torch.cat([G0, G0 + hot])}, n_steps=n_steps, lr=lr)
    r = readouts(pack(h.params), both, kind="softmax")
    filt = train.reached_minimum(h.final_loss, np.tile(np.arange(n), 2), rtol=rtol)
    return SoftmaxHeads(
        h.final_loss.reshape(2, n),
        r["c_G"].reshape(2, n),
        r["loss"].reshape(2, n),
        filt.keep.reshape(2, n),
        h.wall_s,
    )


def copy_start(n: int, seq_len: int, *, init_scale: float = 0.1, seed=None):
    """Packed softmax scores near the copy head, ``G0 + ln L (S − J/L)`` (a hot start)."""
    L = check_positive_int(seq_len, "seq_len", minimum=2)
    G0 = _init(n, L * L, scale=init_scale, seed=seed).reshape(n, L, L)
    return pack({"G": G0 + np.log(L) * (shift_matrix(L) - pooling_matrix(L))})


def group_mean(values, groups, n_groups: int, keep=None) -> np.ndarray:
    """Mean of ``values`` per group label ``0..n_groups-1`` over the entries with ``keep``."""
    v = np.asarray(values, dtype=float).reshape(-1)
    g = np.asarray(groups).reshape(-1)
    k = np.ones_like(v, dtype=bool) if keep is None else np.asarray(keep).reshape(-1)
    return np.array([v[k & (g == i)].mean() for i in range(n_groups)])


def level_crossing(x, y, level: float) -> float:
    """First ``x`` where increasing data ``y(x)`` reaches ``level``, interpolated in ``log x``."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    above = np.nonzero(y >= level)[0]
    if len(above) == 0 or above[0] == 0:
        raise ValueError(f"y does not cross {level} inside the range of x")
    i = above[0]
    t = (level - y[i - 1]) / (y[i] - y[i - 1])
    return float(np.exp(np.log(x[i - 1]) + t * np.log(x[i] / x[i - 1])))


def landau_onset(P, m2, *, above) -> float:
    """The onset of a continuous transition: the zero of a straight line through ``m²(P)`` fitted
    on the points ``above`` it (Landau: ``m² ∝ P − P_on`` just above the onset)."""
    P, m2 = np.asarray(P, dtype=float), np.asarray(m2, dtype=float)
    slope, icpt = np.polyfit(P[above], m2[above], 1)
    return float(-icpt / slope)


def loglog_slope(x, y) -> float:
    """Least-squares slope of ``log y`` against ``log x``."""
    return float(np.polyfit(np.log(x), np.log(y), 1)[0])


def drop_width(steps, curve, *, hi: float = 0.8, lo: float = 0.2) -> float:
    """Steps between a decreasing ``curve`` falling below ``hi`` and below ``lo`` (NaN if it never
    reaches ``lo``)."""
    steps, curve = np.asarray(steps), np.asarray(curve)
    if not (curve < lo).any():
        return float("nan")
    return float(steps[np.argmax(curve < lo)] - steps[np.argmax(curve < hi)])


def gap_crossing(P, gap) -> float:
    """Where ``gap(P)`` (e.g. ``S_cold − S_hot``) changes sign from − to +, interpolated linearly
    between the neighbouring sample sizes with a non-zero gap."""
    P, gap = np.asarray(P, dtype=float), np.asarray(gap, dtype=float)
    differ = np.abs(gap) > 1e-6
    i_lo = np.nonzero(differ & (gap < 0))[0].max()
    i_hi = np.nonzero(differ & (gap > 0))[0].min()
    t = -gap[i_lo] / (gap[i_hi] - gap[i_lo])
    return float(P[i_lo] + t * (P[i_hi] - P[i_lo]))


def sample_coverage_theory(saddle, seq_len: int) -> np.ndarray:
    """Coverage of a posterior *sample* predicted by the fluctuation-corrected linear theory:
    the templates hold ``⟨m²⟩ + (L−1)⟨c_G²⟩`` of ``‖A‖²`` (saddle values plus Laplace variances),
    the transverse and row-sum directions ``[(L²−L−1)v + (L−1)ρ]/L²``."""
    L = seq_len
    tmpl = saddle.m**2 + saddle.var_m + (L - 1) * (saddle.c_G**2 + saddle.var_c_G)
    noise = ((L * L - L - 1) * saddle.v + (L - 1) * saddle.rho) / L**2
    return tmpl / (tmpl + noise)


def linear_precursor_growth(seq_len: int, vocab_size: int) -> float:
    """⟨m²⟩ at 0.95 P_on over ⟨m²⟩ at 0.5 P_on from the exact 1-D pooling integral."""
    p = linear_onset_p(seq_len=seq_len, vocab_size=vocab_size, fluctuations=True)
    P2 = np.array([0.5, 0.95]) * p
    _, mm = linear_pooling_moments(
        P2, seq_len=seq_len, vocab_size=vocab_size, n_grid=2001
    )
    return float(mm[1] / mm[0])


def softmax_precursor_growth(seq_len: int, vocab_size: int) -> tuple[float, float]:
    """var(a_G) at 0.95 P* over 0.5 P*: at equilibrium (1-D integral) and within the
    unstructured basin (Laplace). Only defined from the critical length on."""
    p = softmax_critical_p(seq_len=seq_len, vocab_size=vocab_size)
    P2 = np.array([0.5, 0.95]) * p
    _, vv = softmax_copy_moments(P2, seq_len=seq_len, vocab_size=vocab_size)
    loc = softmax_saddle(P2, seq_len=seq_len, vocab_size=vocab_size).susceptibility
    return float(vv[1] / vv[0]), float(loc[1] / loc[0])
