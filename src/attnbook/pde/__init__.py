"""Part III — deep Transformers as a mean-field PDE (Castin, Ablin, Carrillo & Peyré, 2025).

* :mod:`~attnbook.pde.particles` — the velocity field of every attention variant and particle
  simulation (:func:`velocity`, :func:`simulate`).
* :mod:`~attnbook.pde.symbolic` — SymPy derivations of the Gaussian moment equations.
* :mod:`~attnbook.pde.gaussian` — those equations integrated (:func:`gaussian_flow`).
* :mod:`~attnbook.pde.closed_forms` — hand-written closed forms used as references.
* :mod:`~attnbook.pde.wasserstein` — W₂ between particle clouds and between Gaussians.
* :mod:`~attnbook.pde.meanfield` — the mean-field limit measured: exact 1-D W₂ to a Gaussian,
  rates, particle Jacobians and stability constants.
* :mod:`~attnbook.pde.gradient_flow` — energy, the Z-weighted metric, Sinkhorn as a
  Bures–Wasserstein gradient flow, W₂ geodesics.
"""

from . import plots
from .closed_forms import (
    clustering_limit,
    identity_value_blowup_time,
    identity_value_covariance,
    scalar_blowup_time,
    scalar_softmax_mean,
    scalar_softmax_variance,
)
from .clouds import eigenvalue_ratio, empirical_cov, numerical_rank
from .gaussian import (
    GAUSSIAN_FLOW_KINDS,
    CovarianceFlow,
    GaussianFlow,
    check_covariance,
    covariance_flow,
    gaussian_flow,
    moment_field,
)
from .gradient_flow import (
    EnergyBalance,
    bures_wasserstein_rhs,
    displacement_interpolation,
    energy_balance,
    energy_rate,
    gaussian_energy,
    metric_norm_sq,
    metric_tensor,
    partition_gradient,
    sinkhorn_self_cost,
    sinkhorn_self_cost_particles,
    symmetric_gradient_fd,
    twisted_velocity,
)
from .meanfield import (
    RateFit,
    coupling_distance,
    fit_rate,
    gelbrich_distance,
    one_sided_lipschitz,
    optimal_matching,
    particle_jacobian,
    sample_disk,
    tangent_distance,
    two_sample_rates,
    w2_particles_batch,
    w2_to_gaussian_1d,
)
from .particles import (
    KINDS,
    AttentionParams,
    BlowUpError,
    attention_matrix,
    check_cloud,
    interaction_energy,
    interaction_matrices,
    particle_masses,
    partition_function,
    prepare_inputs,
    resolve_params,
    sample_gaussian,
    simulate,
    sink_weights,
    velocity,
)
from .quadrature import affine_residual, velocity_on_gaussian_1d
from .symbolic import closed_form_gaps, derive_moment_equations, moment_rhs
from .wasserstein import bures_wasserstein, conditional_w2, w2_particles

__all__ = [
    "plots",
    "affine_residual",
    "velocity_on_gaussian_1d",
    "closed_form_gaps",
    "eigenvalue_ratio",
    "empirical_cov",
    "numerical_rank",
    "KINDS",
    "AttentionParams",
    "BlowUpError",
    "attention_matrix",
    "check_cloud",
    "interaction_energy",
    "interaction_matrices",
    "particle_masses",
    "prepare_inputs",
    "partition_function",
    "resolve_params",
    "sample_gaussian",
    "simulate",
    "sink_weights",
    "velocity",
    "GAUSSIAN_FLOW_KINDS",
    "CovarianceFlow",
    "GaussianFlow",
    "check_covariance",
    "covariance_flow",
    "gaussian_flow",
    "moment_field",
    "derive_moment_equations",
    "moment_rhs",
    "clustering_limit",
    "identity_value_blowup_time",
    "identity_value_covariance",
    "scalar_blowup_time",
    "scalar_softmax_mean",
    "scalar_softmax_variance",
    "bures_wasserstein",
    "conditional_w2",
    "w2_particles",
    "RateFit",
    "coupling_distance",
    "fit_rate",
    "gelbrich_distance",
    "one_sided_lipschitz",
    "optimal_matching",
    "particle_jacobian",
    "sample_disk",
    "tangent_distance",
    "two_sample_rates",
    "w2_particles_batch",
    "w2_to_gaussian_1d",
    "EnergyBalance",
    "bures_wasserstein_rhs",
    "displacement_interpolation",
    "energy_balance",
    "energy_rate",
    "gaussian_energy",
    "metric_norm_sq",
    "metric_tensor",
    "partition_gradient",
    "sinkhorn_self_cost",
    "sinkhorn_self_cost_particles",
    "symmetric_gradient_fd",
    "twisted_velocity",
]
