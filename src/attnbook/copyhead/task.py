r"""The copy task: i.i.d. one-hot tokens, the target at each position is the previous token.

A sequence :math:`x_1,\dots,x_L` of tokens drawn uniformly from a vocabulary of size :math:`V`
is encoded one-hot, :math:`x_l\in\{e_1,\dots,e_V\}`. The target is :math:`y_l = x_{l-1}` with the
index taken modulo :math:`L` (periodic, so every position has a target and the task is symmetric
under cyclic shifts). A head that attends from :math:`l` to :math:`l-1` — the shift matrix
:math:`S` — solves the task exactly.

Because the network's loss is quadratic in the attended features, everything a model needs
from the data is a pair of *sufficient statistics* (computed once, independent of the model):

.. math::
    C_{ab} = \sum_{\mu} x_{\mu a} x_{\mu b}^\top,\qquad
    D_{al} = \sum_{\mu} x_{\mu a} y_{\mu l}^\top \qquad (a,b,l = 1..L;\ C_{ab}, D_{al}\in\mathbb R^{V\times V}),

so that for features :math:`h_{\mu l} = \sum_a A_{la} x_{\mu a}` one has
:math:`H^\top H = \sum_{l,a,b} A_{la}A_{lb} C_{ab}` and :math:`H^\top Y = \sum_{l,a} A_{la} D_{al}`.
Training and sampling then cost nothing per sequence: :math:`P` only enters through the counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

import numpy as np
import torch

from attnbook.device import as_generator, default_dtype
from attnbook.validation import as_tensor, check_finite, check_ndim, check_positive_int

__all__ = [
    "copy_task",
    "CopyStats",
    "copy_statistics",
    "expected_statistics",
    "nested_statistics",
]


def copy_task(
    n_sequences: int,
    seq_len: int,
    vocab_size: int,
    *,
    batch_shape=(),
    seed=None,
    dtype: torch.dtype | None = None,
    device=None,
):
    """Draw ``n_sequences`` copy-task sequences (batched over ``batch_shape``).

    Returns ``(X, Y)``, each of shape ``(*batch_shape, n_sequences, seq_len, vocab_size)``,
    one-hot (float64 unless ``dtype``), with ``Y[..., l, :] = X[..., (l - 1) % seq_len, :]``.
    ``seed`` is an int, a ``torch.Generator`` or ``None`` (torch's global generator); tokens
    are drawn on the CPU, so the same seed gives the same tokens on every machine.
    """
    P = check_positive_int(n_sequences, "n_sequences")
    L = check_positive_int(seq_len, "seq_len", minimum=2)
    V = check_positive_int(vocab_size, "vocab_size", minimum=2)
    if isinstance(batch_shape, int):
        batch_shape = (batch_shape,)
    batch_shape = tuple(check_positive_int(b, "batch_shape") for b in batch_shape)
    gen = as_generator(seed)
    tokens = torch.randint(V, (*batch_shape, P, L), generator=gen)
    X = torch.nn.functional.one_hot(tokens, V).to(default_dtype(dtype))
    if device is not None:
        X = X.to(device)
    Y = torch.roll(X, shifts=1, dims=-2)  # Y[l] = X[l-1], periodic
    return X, Y


@dataclass
class CopyStats:
    """Sufficient statistics of a data set (batched over leading dims).

    ``xx[..., a, b, :, :] = Σ_μ x_{μa} x_{μb}ᵀ`` and ``xy[..., a, l, :, :] = Σ_μ x_{μa} y_{μl}ᵀ``
    (shapes ``(..., L, L, V, V)``), ``yy = Σ_μ Σ_l ‖y_{μl}‖²`` and ``n_sequences`` = P (shape ``(...)``).
    """

    xx: torch.Tensor
    xy: torch.Tensor
    yy: torch.Tensor
    n_sequences: torch.Tensor

    @property
    def seq_len(self) -> int:
        return self.xx.shape[-3]

    @property
    def vocab_size(self) -> int:
        return self.xx.shape[-1]

    def _map(self, fun) -> CopyStats:
        return CopyStats(*(fun(getattr(self, f.name)) for f in fields(self)))

    def to(self, device=None, dtype=None) -> CopyStats:
        """The statistics on another device / in another dtype."""

        def move(t):
            return t.to(device=device or t.device, dtype=dtype or t.dtype)

        return self._map(move)

    @property
    def batch_shape(self) -> tuple:
        return tuple(self.n_sequences.shape)

    def __getitem__(self, index) -> CopyStats:
        """The statistics of some data sets: ``stats[2:5]``, ``stats[mask]`` (first batch dim)."""
        if not self.batch_shape:
            raise IndexError("these statistics have no batch dimension to index")
        return self._map(lambda t: t[index])

    def repeat(self, n_times: int) -> CopyStats:
        """The batch repeated ``n_times`` (``[s0, s1, s0, s1, ...]``, e.g. one per restart)."""
        n = check_positive_int(n_times, "n_times")
        return CopyStats.cat([self] * n)

    @staticmethod
    def cat(stats: Sequence[CopyStats]) -> CopyStats:
        """Concatenate batched statistics along their first batch dimension."""
        stats = list(stats)
        if not stats or not all(isinstance(s, CopyStats) for s in stats):
            raise TypeError("stats must be a non-empty sequence of CopyStats")
        if any(not s.batch_shape for s in stats):
            raise ValueError(
                "every CopyStats must have a batch dimension to concatenate"
            )
        return CopyStats(
            *(torch.cat([getattr(s, f.name) for s in stats]) for f in fields(CopyStats))
        )


def _check_stats(stats) -> CopyStats:
    """``stats`` for a batched run: a :class:`CopyStats` with one data set per row."""
    if not isinstance(stats, CopyStats):
        raise TypeError(f"stats must be a CopyStats, got {type(stats).__name__}")
    if stats.n_sequences.dim() != 1:
        raise ValueError("stats must have one batch dimension (one data set per row)")
    return stats


def copy_statistics(X, Y=None) -> CopyStats:
    """Sufficient statistics of ``X`` (and targets ``Y``, default the copy targets of ``X``).

    ``X`` and ``Y`` have shape ``(..., P, L, V)``; the leading dims are kept as a batch (one data
    set per model, e.g. seeds × sample sizes — pad nothing: use :func:`copy_task` per size and
    stack the statistics, which all share the shape ``(..., L, L, V, V)``).
    """
    X = as_tensor(X, "X")
    check_ndim(X, "X", 3, at_least=True)
    check_finite(X, "X")
    if Y is None:
        Y = torch.roll(X, shifts=1, dims=-2)
    else:
        Y = as_tensor(Y, "Y", dtype=X.dtype, device=X.device)
        if Y.shape != X.shape:
            raise ValueError(
                f"Y must have the shape of X {tuple(X.shape)}, got {tuple(Y.shape)}"
            )
        check_finite(Y, "Y")
    xx = torch.einsum("...pai,...pbj->...abij", X, X)
    xy = torch.einsum("...pai,...plj->...alij", X, Y)
    yy = (Y * Y).sum((-1, -2, -3))
    P = torch.full(X.shape[:-3], float(X.shape[-3]), dtype=X.dtype, device=X.device)
    return CopyStats(xx, xy, yy, P)


def expected_statistics(
    n_sequences, seq_len: int, vocab_size: int, *, dtype=None, device=None
) -> CopyStats:
    r"""The statistics' expectations, :math:`E[C_{ab}] = P(\delta_{ab} I/V + (1-\delta_{ab}) J/V^2)`.

    These are what the effective action of :mod:`attnbook.copyhead.action` replaces the sampled
    statistics by (the large-:math:`PL/V` approximation). ``n_sequences`` may be a float or a
    1-d array of sample sizes (then the statistics are batched over it).
    """
    L = check_positive_int(seq_len, "seq_len", minimum=2)
    V = check_positive_int(vocab_size, "vocab_size", minimum=2)
    P = as_tensor(n_sequences, "n_sequences", dtype=default_dtype(dtype), device=device)
    if bool((P <= 0).any()):
        raise ValueError("n_sequences must be positive")
    dt, dev = P.dtype, P.device
    I = torch.eye(V, dtype=dt, device=dev)
    Jv = torch.full((V, V), 1.0 / V**2, dtype=dt, device=dev)
    eyeL = torch.eye(L, dtype=dt, device=dev)[:, :, None, None]
    pair = eyeL * (I / V) + (1 - eyeL) * Jv  # E[x_a x_b^T]
    S = torch.zeros(L, L, dtype=dt, device=dev)
    idx = torch.arange(L, device=dev)
    S[(idx - 1) % L, idx] = 1.0  # a = l - 1  <=> y_l = x_a
    cross = S[:, :, None, None] * (I / V) + (1 - S[:, :, None, None]) * Jv
    Pb = P[..., None, None, None, None]
    return CopyStats(Pb * pair, Pb * cross, P * L, P.clone())


def nested_statistics(
    n_sequences,
    seq_len: int,
    vocab_size: int,
    *,
    n_datasets: int = 1,
    seed=None,
    dtype: torch.dtype | None = None,
) -> CopyStats:
    """Statistics of nested data sets: for each sample size ``p`` in ``n_sequences`` and each of
    ``n_datasets`` independent data sets, the first ``p`` sequences of one draw of
    ``max(n_sequences)``. The batch is ``(len(n_sequences) · n_datasets,)``, ordered
    P-major (index ``i_P · n_datasets + i_data``), so growing ``P`` adds data to the same set.
    """
    P = np.asarray(n_sequences).reshape(-1)
    if P.size == 0 or np.any(P < 1) or np.any(P != np.round(P)):
        raise ValueError(f"n_sequences must be positive integers, got {n_sequences!r}")
    n_ds = check_positive_int(n_datasets, "n_datasets")
    X, Y = copy_task(
        int(P.max()), seq_len, vocab_size, batch_shape=(n_ds,), seed=seed, dtype=dtype
    )
    return CopyStats.cat([copy_statistics(X[:, : int(p)], Y[:, : int(p)]) for p in P])
