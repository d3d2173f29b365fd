"""Value comparison of two frozen tensors of one dtype: digests first, then the native core."""

from __future__ import annotations

from dataclasses import dataclass

from trainparity._internal.native.cuda import CPU_BACKEND, compare_buffers
from trainparity._internal.native.dtypes import info_for_text
from trainparity._internal.state.freeze import FrozenTensor


@dataclass(frozen=True)
class TensorValueComparison:
    """How two same-shaped, same-dtype tensors compare element by element.

    The error magnitudes are relative to the baseline (docs/compatibility.md, "Comparison");
    they are 0.0 when the two tensors are byte-identical.
    `method` says how equality was decided: "digest" (stored digests only)
    or "native" (a pass over both buffers). `backend` says where that pass
    ran: "cpu" (the C core over host memory; also for digest decisions),
    "cuda-kernel" (the CUDA kernels, both tensors on one GPU) or "host-stream"
    (GPU bytes streamed to the host through the C core in bounded blocks); all
    three give bit-identical results. When only digests of different values
    are known, count and magnitudes are None.
    """

    numel: int
    mismatch_count: int | None  # None: only digests were available, and they differ
    first_mismatch_index: int | None
    max_abs_error: float | None
    max_rel_error: float | None
    relative_rms_error: float | None
    method: str
    backend: str = CPU_BACKEND

    @property
    def equal(self) -> bool:
        return self.mismatch_count == 0


def compare_tensor_values(
    baseline: FrozenTensor,
    candidate: FrozenTensor,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    equal_nan: bool = False,
) -> TensorValueComparison:
    """Compare values bitwise (rtol/atol None) or under `|a-b| <= atol + rtol*|b|`."""
    entry = info_for_text(baseline.dtype)
    numel = baseline.numel
    if _equal_by_digest(baseline, candidate, entry.is_floating, rtol is None, equal_nan):
        return TensorValueComparison(numel, 0, None, 0.0, 0.0, 0.0, "digest")
    if baseline.data is None or candidate.data is None:
        # A digest-only snapshot: it can say that the tensor differs, not where.
        return TensorValueComparison(numel, None, None, None, None, None, "digest")
    (first, count, max_abs, max_rel, rel_rms), backend = compare_buffers(
        entry.name, baseline.data, candidate.data, rtol=rtol, atol=atol, equal_nan=equal_nan
    )
    return TensorValueComparison(
        numel=numel,
        mismatch_count=count,
        first_mismatch_index=None if first < 0 else first,
        max_abs_error=max_abs,
        max_rel_error=max_rel,
        relative_rms_error=rel_rms,
        method="native",
        backend=backend,
    )


def _equal_by_digest(
    baseline: FrozenTensor,
    candidate: FrozenTensor,
    is_floating: bool,
    exact: bool,
    equal_nan: bool,
) -> bool:
    """Equal digests prove equal bytes; equal bytes prove equality unless NaN may count as unequal."""
    if baseline.digest is None or candidate.digest is None:
        return False
    if baseline.digest != candidate.digest:
        return False
    # Under tolerance without equal_nan, a NaN is unequal to itself: only a pass can tell.
    return exact or equal_nan or not is_floating
