"""`trainparity.cuda_backend`: the CUDA backend, a documented path kept as a face; see docs/api.md."""

from trainparity.native.cuda import BLOCK_ALIGNMENT as BLOCK_ALIGNMENT
from trainparity.native.cuda import CPU_BACKEND as CPU_BACKEND
from trainparity.native.cuda import HOST_BLOCK_BYTES as HOST_BLOCK_BYTES
from trainparity.native.cuda import HOST_STREAM_BACKEND as HOST_STREAM_BACKEND
from trainparity.native.cuda import KERNEL_BACKEND as KERNEL_BACKEND
from trainparity.native.cuda import CompareResult as CompareResult
from trainparity.native.cuda import DeviceTensorBytes as DeviceTensorBytes
from trainparity.native.cuda import compare_buffers as compare_buffers
from trainparity.native.cuda import core_threads as core_threads
from trainparity.native.cuda import digest_buffer as digest_buffer
from trainparity.native.cuda import iter_host_blocks as iter_host_blocks
from trainparity.native.cuda import summary_buffer as summary_buffer
from trainparity.native.cuda import write_buffer as write_buffer
from trainparity.native.cuda_kernels import KERNELS_VARIABLE as KERNELS_VARIABLE
from trainparity.native.cuda_kernels import build_kernels as build_kernels
from trainparity.native.cuda_kernels import kernel_unavailable_reason as kernel_unavailable_reason
from trainparity.native.cuda_kernels import kernels_available as kernels_available
