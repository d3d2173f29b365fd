"""Per-tensor summaries: the digest plus float64 count, sum, L2 norm, max |x| and NaN/Inf counts."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from trainparity._internal.native.cuda import digest_buffer, summary_buffer
from trainparity._internal.native.dtypes import info_for_text

# The dtypes the C core summarises; others (complex, float8) keep digest and count only.
SUMMARISED_DTYPES = frozenset(
    {
        "bool",
        "uint8",
        "int8",
        "int16",
        "uint16",
        "int32",
        "uint32",
        "int64",
        "uint64",
        "float16",
        "bfloat16",
        "float32",
        "float64",
    }
)


@dataclass(frozen=True)
class TensorSummary:
    """What a summary-mode recording keeps of one tensor at one step (64 bytes on disk).

    `sum`, `l2_norm` and `max_abs` are over the finite elements, in float64,
    and NaN when the dtype is not summarised (complex, float8) or the step
    stored full values instead (computed from them on demand).
    """

    digest: bytes
    count: int
    sum: float
    l2_norm: float
    max_abs: float
    nan_count: int
    inf_count: int


def summarize_tensor(dtype: str, data: Any, *, with_statistics: bool = True) -> TensorSummary:
    """Digest and statistics of one frozen tensor's bytes (host buffer or DeviceTensorBytes).

    One fused pass (`summary_buffer`: the C core, host blocks of a GPU tensor,
    or the CUDA kernel) gives the digest, which follows core.DIGEST_VERSION, and
    the statistics together; without statistics, or for a dtype the core does
    not summarise, the digest alone (`digest_buffer`).
    """
    count = len(data) // info_for_text(dtype).element_size
    short = dtype.removeprefix("torch.")
    if not with_statistics or short not in SUMMARISED_DTYPES:
        digest, _ = digest_buffer(data)
        return TensorSummary(digest, count, math.nan, math.nan, math.nan, 0, 0)
    digest, state, _ = summary_buffer(short, data)
    _, total, squares, max_abs, nan_count, inf_count = state
    return TensorSummary(digest, count, total, math.sqrt(squares), max_abs, nan_count, inf_count)
