r"""Part I — focus and dilution: a one-layer transformer learning Markov data.

* :mod:`~attnbook.focus.population` — the exact long-context population loss, its closed-form
  gradient and the gradient flow (SciPy, adaptive), batched over parameter sets.
* :mod:`~attnbook.focus.model` — the same model on finite contexts (torch, ensembles of seeds
  trained in one vectorised run, CPU or GPU).
* :mod:`~attnbook.focus.theory` — closed forms of the four stages and their SymPy derivations.
* :mod:`~attnbook.focus.metrics` — spectra, attention entropies, alignments, PCA, stage times.

The four-stage story is from Chen, Lin, Xu and Luo, *Focus and Dilution: The Multi-stage
Learning Process of Attention* (arXiv 2605.01199, ICML 2026); the formulas here are our
reconstruction for the model stated in :mod:`~attnbook.focus.population`.
"""

# The package exports what the chapters, tools/, bench/ and the API page use through it;
# the rest is imported from its module (attnbook.focus.metrics.attention_entropy).
from ..errors import FlowDiverged, TrainingDiverged
from .metrics import stage_times
from .model import (
    MarkovWindows,
    OneLayerTransformer,
    TextWindows,
    finite_forward,
    markov_context_loss,
    train,
)
from .population import (
    Params,
    gradient_descent,
    init_params,
    population_flow,
    population_gradient,
    population_hessian,
    population_loss,
    time_grid,
)
from .theory import (
    attention_growth_rate,
    condensation_directions,
    condensation_rate,
    saddle_point,
)

__all__ = [
    "time_grid",
    "population_loss",
    "population_gradient",
    "population_hessian",
    "population_flow",
    "gradient_descent",
    "init_params",
    "Params",
    "FlowDiverged",
    "condensation_directions",
    "condensation_rate",
    "attention_growth_rate",
    "saddle_point",
    "OneLayerTransformer",
    "MarkovWindows",
    "TextWindows",
    "train",
    "finite_forward",
    "markov_context_loss",
    "TrainingDiverged",
    "stage_times",
]
