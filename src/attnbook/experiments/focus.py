"""Part I sweeps: the population gradient flow over seeds × d (Zipf π) and over δ.

One point integrates an ensemble of ``n_models`` seeds as one batched flow
(:func:`attnbook.focus.population_flow`) and returns the loss, the attention entropy, the
singular values of :math:`W_0` and the stage times of every member
(:func:`attnbook.focus.metrics.analyse_flow`). The flow is integrated by
SciPy on the CPU whatever ``device`` says (it is recorded); ``dtype`` is float64 throughout.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .. import focus, markov
from ..focus.metrics import analyse_flow
from . import Experiment, Scale, register

STAGES = ("I_start", "I_end", "II_start", "II_end", "III_end", "IV_escape")


@dataclass(frozen=True)
class FlowConfig:
    """One ensemble of population flows (the chain is Zipf(``zipf_s``) or δ-perturbed)."""

    d: int = 4
    m: int = 8
    chain: str = "zipf"  # "zipf": pi_k ∝ k^-s; "perturbed": (pi_top, 0.1+δ, 0.1, 0.1-δ)
    zipf_s: float = 1.0
    pi_top: float = 0.7
    delta: float = 0.02
    lam: float = 0.5
    eps: float = 1e-3
    n_models: int = 4
    seed: int = 0
    t_end: float = 2e3
    n_dense: int = 101
    n_log: int = 100
    rtol: float = 1e-8
    atol: float = 1e-11
    device: str = "cpu"
    dtype: str = "float64"


def zipf_law(d: int, s: float) -> np.ndarray:
    """The Zipf law :math:`\\pi_k \\propto k^{-s}`, k = 1..d."""
    p = np.arange(1, d + 1, dtype=float) ** -float(s)
    return p / p.sum()


def flow_ensemble(cfg: FlowConfig) -> dict[str, np.ndarray]:
    """Integrate ``cfg.n_models`` seeds of the population flow; per-model summaries."""
    if cfg.chain == "zipf":
        P = markov.lazy_chain(torch.tensor(zipf_law(cfg.d, cfg.zipf_s)), cfg.lam)
    else:
        P = markov.perturbed_chain(cfg.d, cfg.pi_top, cfg.delta, cfg.lam)
    start = focus.init_params(
        cfg.d, cfg.m, eps=cfg.eps, n_models=cfg.n_models, seed=cfg.seed
    )
    t_eval = focus.time_grid(cfg.t_end, n_dense=cfg.n_dense, n_log=cfg.n_log)
    run = focus.population_flow(
        start, P, cfg.t_end, t_eval=t_eval, rtol=cfg.rtol, atol=cfg.atol
    )
    per_model = [analyse_flow(run, model=k) for k in range(cfg.n_models)]
    stages = np.array([[st[s] for s in STAGES] for _, st in per_model])
    return {
        "t": run.t,
        "pi": run.pi,
        "loss": run.loss,
        "entropy_uniform": np.stack([m["entropy_uniform"] for m, _ in per_model], 1),
        "sv_W0": np.stack([m["sv_W0"] for m, _ in per_model], 1),
        "stage_times": stages,
    }


DIMS = {
    "t": ("time",),
    "pi": ("token",),
    "loss": ("time", "model"),
    "entropy_uniform": ("time", "model"),
    "sv_W0": ("time", "model", "sv"),
    "stage_times": ("model", "stage"),
}

# a few seconds: two small models, a short loose flow
SMOKE = dict(m=3, n_models=2, t_end=60.0, n_dense=31, n_log=10, rtol=1e-6, atol=1e-9)


def _register_flow(name: str, description: str, note: str, scales: dict) -> None:
    """Register a sweep of :func:`flow_ensemble` (Part I, :class:`FlowConfig`, :data:`DIMS`)."""
    register(
        Experiment(
            name=name,
            part="I",
            description=description,
            function=flow_ensemble,
            config=FlowConfig,
            dims=DIMS,
            note=note,
            scales=scales,
        )
    )


_register_flow(
    "focus-zipf",
    "population flow over seeds × d, Zipf(1) stationary law, λ = 0.5",
    "SciPy BDF on the CPU (device is recorded, not used); stage names: "
    + ", ".join(STAGES),
    {
        "smoke": Scale(axes={"d": (3, 4), "seed": (0,)}, fixed=SMOKE),
        "book": Scale(
            axes={"d": (3, 4, 5, 6), "seed": (0, 100)},
            fixed=dict(m=8, n_models=4, t_end=2e3),
        ),
        "paper": Scale(
            axes={"d": (4, 8, 16, 32), "seed": tuple(range(0, 800, 100))},
            fixed=dict(m=32, n_models=8, t_end=2e4, n_dense=601, n_log=300),
        ),
    },
)

_register_flow(
    "focus-delta",
    "population flow over the asymmetry δ of π = (0.7, 0.1+δ, 0.1, 0.1−δ)",
    "escape time of stage IV vs δ; SciPy BDF on the CPU",
    {
        "smoke": Scale(
            axes={"delta": (0.0, 0.04), "seed": (0,)},
            fixed=dict(SMOKE, chain="perturbed"),
        ),
        "book": Scale(
            axes={"delta": (0.0, 0.01, 0.02, 0.04, 0.08), "seed": (0,)},
            fixed=dict(chain="perturbed", m=8, n_models=4, t_end=2e4),
        ),
        "paper": Scale(
            axes={
                "delta": (0.0, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08),
                "seed": tuple(range(0, 400, 100)),
            },
            fixed=dict(
                chain="perturbed", m=8, n_models=16, t_end=1e5, n_dense=601, n_log=300
            ),
        ),
    },
)
