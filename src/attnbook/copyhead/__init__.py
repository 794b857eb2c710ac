"""Part II — the copy head as a phase transition.

* :mod:`~attnbook.copyhead.task` — the copy task and its sufficient statistics,
* :mod:`~attnbook.copyhead.model` — one softmax / linear attention head (model E*),
* :mod:`~attnbook.copyhead.action` — the effective action of the attention matrix (SymPy
  derivation, exact evidence, order-parameter reduction, minimisers, critical sample sizes),
* :mod:`~attnbook.copyhead.order` — the order parameters ``(c1, cG)`` and coverage,
* :mod:`~attnbook.copyhead.plots` — the part's figures.
"""

# The package exports what the chapters, tools/, bench/ and the API page use through it;
# the rest is imported from its module (attnbook.copyhead.model.prior_energy).
from attnbook.copyhead import action
from attnbook.copyhead.action import softmax_critical_length
from attnbook.copyhead.model import (
    attention_matrix,
    forward,
    init_params,
    loss,
    token_mse,
)
from attnbook.copyhead.order import (
    circulant_coverage,
    coverage,
    order_parameters,
    pooling_matrix,
    shift_matrix,
)
from attnbook.copyhead.task import (
    CopyStats,
    copy_statistics,
    copy_task,
    expected_statistics,
    nested_statistics,
)

__all__ = [
    "order_parameters",
    "coverage",
    "circulant_coverage",
    "shift_matrix",
    "pooling_matrix",
    "copy_task",
    "copy_statistics",
    "expected_statistics",
    "CopyStats",
    "nested_statistics",
    "softmax_critical_length",
    "attention_matrix",
    "forward",
    "init_params",
    "loss",
    "token_mse",
    "action",
]
