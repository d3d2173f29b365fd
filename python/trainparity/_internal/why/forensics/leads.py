"""Which environment differences fit the op a divergence starts in: op kinds and lead ranking."""

from __future__ import annotations

from trainparity._internal.why.environment_leads import EnvironmentLead

__all__ = ["OP_KINDS", "op_kind", "rank_leads"]

# Matrix products: a long reduction per element, and the ops TF32 / reduced-precision
# flags and BLAS libraries govern.
_MATMUL = frozenset(
    {
        "mm", "addmm", "bmm", "baddbmm", "addbmm", "matmul", "linear", "mv", "addmv", "dot",
        "vdot", "_addmm_activation", "convolution", "_convolution", "convolution_backward",
        "cudnn_convolution", "mkldnn_convolution", "_scaled_mm", "_int_mm",
        "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu",
        "_flash_attention_forward", "_efficient_attention_forward",
    }
)  # fmt: skip
# Reductions whose result depends on the order the elements are added in.
_REDUCTION = frozenset(
    {
        "sum", "mean", "nansum", "nanmean", "prod", "norm", "linalg_vector_norm", "var", "std",
        "var_mean", "std_mean", "cumsum", "cumprod", "logsumexp", "logcumsumexp", "softmax",
        "_softmax", "log_softmax", "_log_softmax", "_softmax_backward_data",
        "_log_softmax_backward_data", "native_layer_norm", "native_layer_norm_backward",
        "native_batch_norm", "native_batch_norm_backward", "_native_batch_norm_legit",
        "_native_batch_norm_legit_functional", "native_group_norm", "native_group_norm_backward",
        "_fused_rms_norm", "_fused_rms_norm_backward", "nll_loss_forward", "nll_loss2d_forward",
        "mse_loss", "binary_cross_entropy", "embedding_dense_backward", "index_add", "index_add_",
        "scatter_add", "scatter_add_", "scatter_reduce", "index_reduce", "_foreach_norm",
        "dist", "_cdist_forward", "trace", "_fused_adam", "_fused_adamw",
    }
)  # fmt: skip
# Random number generation: differs with seeds and generator state, not with rounding.
_RANDOM = frozenset(
    {
        "bernoulli", "bernoulli_", "normal", "normal_", "uniform_", "rand", "randn", "randint",
        "randperm", "random_", "native_dropout", "exponential_", "multinomial", "geometric_",
    }
)  # fmt: skip

OP_KINDS = ("input", "reduction", "matmul", "random", "elementwise")

# For each op kind, the lead categories in the order they explain it.
_ORDER = {
    "input": ("simd", "library_version", "threads", "precision", "hardware", "determinism"),
    "reduction": ("threads", "simd", "library_version", "determinism", "hardware", "precision"),
    "matmul": ("precision", "threads", "library_version", "hardware", "simd", "determinism"),
    "random": ("determinism", "library_version", "hardware", "threads", "simd", "precision"),
    "elementwise": ("simd", "hardware", "library_version", "precision", "threads", "determinism"),
}
# Why the first category fits the kind.
_WHY = {
    "input": "the difference is in an input no traced op made (a batch tensor, a parameter): "
    "it was built on the host, where NumPy and other libraries pick SIMD kernels at run time "
    "(numpy.simd_dispatched, NPY_DISABLE_CPU_FEATURES) that round differently",
    "reduction": "{op} is a reduction: with another thread count or vector width its partial "
    "sums are combined in another order",
    "matmul": "{op} is a matrix multiply: TF32 and reduced-precision settings change how its "
    "products are rounded and accumulated",
    "random": "{op} draws random numbers: seeds and generator settings decide its output",
    "elementwise": "{op} is element-wise: other vector kernels (FMA use, approximations of "
    "transcendental functions) round differently",
}


def op_kind(name: str) -> str:
    """The kind of an op (`aten::sum.dim_IntList` -> "reduction"): reduction, matmul, random or elementwise."""
    base = name.split("::", 1)[-1].split(".", 1)[0]
    if base in _MATMUL:
        return "matmul"
    if base in _REDUCTION:
        return "reduction"
    if base in _RANDOM:
        return "random"
    return "elementwise"


def rank_leads(
    leads: tuple[EnvironmentLead, ...], kind: str, op_name: str
) -> tuple[EnvironmentLead, ...]:
    """The leads ordered for an op kind; those of the kind's first category say why they fit.

    For an inherited input, NumPy's own facts come first within their category.
    """
    order = _ORDER[kind]
    why = _WHY[kind].format(op=op_name)

    def position(lead: EnvironmentLead) -> tuple[int, int, str]:
        rank = order.index(lead.category) if lead.category in order else len(order)
        numpy_first = 0 if kind == "input" and _is_numpy(lead.key) else 1
        return (rank, numpy_first, lead.key)

    ranked = []
    for lead in sorted(leads, key=position):
        if lead.category == order[0]:
            lead = EnvironmentLead(lead.key, lead.category, lead.baseline, lead.candidate,
                                   f"{why}; {lead.note}")  # fmt: skip
        ranked.append(lead)
    return tuple(ranked)


def _is_numpy(key: str) -> bool:
    return key.startswith("numpy.") or key.startswith("variables.NPY_")
