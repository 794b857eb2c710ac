"""Part III — deep Transformers as a mean-field PDE (Castin, Ablin, Carrillo & Peyré, 2025).

* :mod:`~attnbook.pde.particles` — the velocity field of every attention variant and particle
  simulation (:func:`velocity`, :func:`simulate`).
* :mod:`~attnbook.pde.symbolic` — SymPy derivations of the Gaussian moment equations.
* :mod:`~attnbook.pde.gaussian` — those equations integrated (:func:`gaussian_flow`).
* :mod:`~attnbook.pde.closed_forms` — hand-written closed forms used as references.
* :mod:`~attnbook.pde.wasserstein` — W₂ between particle clouds and between Gaussians.
"""
from .particles import (KINDS, AttentionParams, BlowUpError, attention_matrix, interaction_energy,
                        partition_function, resolve_params, sample_gaussian, simulate, sink_weights,
                        velocity)
from .gaussian import (GAUSSIAN_FLOW_KINDS, CovarianceFlow, GaussianFlow, check_covariance,
                       covariance_flow, gaussian_flow, moment_field)
from .symbolic import derive_moment_equations, moment_rhs
from .closed_forms import (clustering_limit, identity_value_blowup_time, identity_value_covariance,
                           scalar_blowup_time, scalar_softmax_mean, scalar_softmax_variance)
from .wasserstein import bures_wasserstein, conditional_w2, w2_particles

__all__ = ["KINDS", "AttentionParams", "BlowUpError", "attention_matrix", "interaction_energy",
           "partition_function", "resolve_params", "sample_gaussian", "simulate", "sink_weights",
           "velocity", "GAUSSIAN_FLOW_KINDS", "CovarianceFlow", "GaussianFlow", "check_covariance",
           "covariance_flow", "gaussian_flow", "moment_field", "derive_moment_equations",
           "moment_rhs", "clustering_limit", "identity_value_blowup_time",
           "identity_value_covariance", "scalar_blowup_time", "scalar_softmax_mean",
           "scalar_softmax_variance", "bures_wasserstein", "conditional_w2", "w2_particles"]
