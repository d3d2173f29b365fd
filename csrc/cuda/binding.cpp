/* Python binding of the CUDA compare, digest and summary launchers, built by torch.utils.cpp_extension on first use.
 *
 * Thin: checks the tensors, takes a workspace from torch's caching allocator on
 * the tensors' device, releases the GIL and calls the launcher on the stream
 * the caller passes (trainparity.cuda_backend passes the current stream of the
 * tensors' device, inside a device guard). */
#include <torch/extension.h>

#include <cstdint>
#include <optional>
#include <string>

#include "launchers.h"

namespace {

void check_tensor(const torch::Tensor &tensor, const char *what)
{
    TORCH_CHECK_VALUE(tensor.is_cuda(), what, " must be a CUDA tensor, got one on ", tensor.device());
    TORCH_CHECK_VALUE(tensor.is_contiguous(), what, " must be contiguous");
}

int64_t byte_count(const torch::Tensor &tensor)
{
    return tensor.numel() * static_cast<int64_t>(tensor.element_size());
}

tp_cuda_launch_shape launch_shape(int64_t block_threads, int64_t grid_blocks)
{
    TORCH_CHECK_VALUE(block_threads == 0 || (block_threads % 32 == 0 && block_threads >= 32 &&
                                             block_threads <= 256),
                      "block_threads must be 0 (automatic) or a multiple of 32 from 32 to 256, "
                      "got ",
                      block_threads);
    TORCH_CHECK_VALUE(grid_blocks >= 0 && grid_blocks <= 0x7FFFFFFF,
                      "grid_blocks must be 0 (automatic) or a positive int32, got ", grid_blocks);
    return tp_cuda_launch_shape{static_cast<unsigned>(block_threads),
                                static_cast<unsigned>(grid_blocks)};
}

cudaStream_t stream_from(int64_t handle)
{
    return reinterpret_cast<cudaStream_t>(static_cast<intptr_t>(handle));
}

torch::Tensor workspace_for(const torch::Tensor &like, size_t bytes)
{
    return torch::empty({static_cast<int64_t>(bytes)}, like.options().dtype(torch::kUInt8));
}

py::tuple compare(const torch::Tensor &baseline, const torch::Tensor &candidate,
                  const std::string &dtype, std::optional<double> rtol,
                  std::optional<double> atol, bool equal_nan, int64_t stream,
                  int64_t block_threads, int64_t grid_blocks)
{
    check_tensor(baseline, "baseline");
    check_tensor(candidate, "candidate");
    TORCH_CHECK_VALUE(baseline.device() == candidate.device(),
                      "baseline and candidate must be on one device, got ", baseline.device(),
                      " and ", candidate.device());
    int dtype_index = tp_cuda_dtype_index(dtype.c_str());
    TORCH_CHECK_VALUE(dtype_index >= 0, "the CUDA kernels do not compare dtype '", dtype,
                      "'; compare it through the host instead");
    TORCH_CHECK_VALUE(rtol.has_value() == atol.has_value(),
                      "give both rtol and atol for a tolerance comparison, or neither");
    const int64_t nbytes = byte_count(baseline);
    const int64_t itemsize = static_cast<int64_t>(tp_cuda_dtype_size(dtype_index));
    TORCH_CHECK_VALUE(nbytes == byte_count(candidate),
                      "baseline and candidate must have the same byte length, got ", nbytes,
                      " and ", byte_count(candidate), " bytes");
    TORCH_CHECK_VALUE(nbytes % itemsize == 0, "byte length ", nbytes,
                      " is not a multiple of the ", dtype, " element size ", itemsize);
    const size_t elements = static_cast<size_t>(nbytes / itemsize);
    const size_t workspace_bytes = tp_cuda_compare_workspace_bytes(elements);
    torch::Tensor workspace = workspace_for(baseline, workspace_bytes);
    const tp_cuda_launch_shape shape = launch_shape(block_threads, grid_blocks);
    tp_cuda_compare_result result;
    int status;
    {
        py::gil_scoped_release released;
        status = tp_cuda_compare(dtype_index, baseline.data_ptr(), candidate.data_ptr(), elements,
                                 rtol.has_value(), rtol.value_or(0.0), atol.value_or(0.0),
                                 equal_nan, workspace.data_ptr(), workspace_bytes, shape,
                                 stream_from(stream), &result);
    }
    TORCH_CHECK(status == 0, "trainparity CUDA compare failed: ", tp_cuda_error_string(status));
    return py::make_tuple(result.first_mismatch_index, result.mismatch_count,
                          result.max_abs_error, result.max_rel_error,
                          result.relative_rms_error);
}

py::bytes digest(const torch::Tensor &data, int64_t stream, int64_t block_threads,
                 int64_t grid_blocks, int64_t version)
{
    check_tensor(data, "data");
    TORCH_CHECK_VALUE(version == 1 || version == 2,
                      "digest version must be one of the supported digest versions (1, 2), got ",
                      version);
    const size_t nbytes = static_cast<size_t>(byte_count(data));
    const size_t workspace_bytes = tp_cuda_digest_workspace_bytes(nbytes);
    torch::Tensor workspace = workspace_for(data, workspace_bytes);
    const tp_cuda_launch_shape shape = launch_shape(block_threads, grid_blocks);
    unsigned char out[16];
    int status;
    {
        py::gil_scoped_release released;
        status = tp_cuda_digest(static_cast<int>(version), data.data_ptr(), nbytes,
                                workspace.data_ptr(), workspace_bytes, shape,
                                stream_from(stream), out);
    }
    TORCH_CHECK(status == 0, "trainparity CUDA digest failed: ", tp_cuda_error_string(status));
    return py::bytes(reinterpret_cast<const char *>(out), sizeof out);
}

py::tuple digest_summary(const torch::Tensor &data, const std::string &dtype, int64_t stream,
                         int64_t block_threads, int64_t grid_blocks, int64_t version)
{
    check_tensor(data, "data");
    const int dtype_index = tp_cuda_dtype_index(dtype.c_str());
    TORCH_CHECK_VALUE(dtype_index >= 0, "the CUDA kernels do not summarise dtype '", dtype, "'");
    const size_t itemsize = tp_cuda_dtype_size(dtype_index);
    const size_t nbytes = static_cast<size_t>(byte_count(data));
    TORCH_CHECK_VALUE(nbytes % itemsize == 0, "byte length ", nbytes, " is not a multiple of the ",
                      dtype, " element size ", itemsize);
    py::bytes digest_bytes = digest(data, stream, block_threads, grid_blocks, version);
    const size_t elements = nbytes / itemsize;
    const size_t workspace_bytes = tp_cuda_summary_workspace_bytes(dtype_index, elements);
    torch::Tensor workspace = workspace_for(data, workspace_bytes);
    const tp_cuda_launch_shape shape = launch_shape(block_threads, grid_blocks);
    tp_cuda_summary_result result;
    int status;
    {
        py::gil_scoped_release released;
        status = tp_cuda_summary(dtype_index, data.data_ptr(), elements, workspace.data_ptr(),
                                 workspace_bytes, shape, stream_from(stream), &result);
    }
    TORCH_CHECK(status == 0, "trainparity CUDA summary failed: ", tp_cuda_error_string(status));
    return py::make_tuple(digest_bytes,
                          py::make_tuple(result.count, result.sum, result.sum_squares,
                                         result.max_abs, result.nan_count, result.inf_count));
}

std::vector<std::string> dtypes()
{
    std::vector<std::string> names;
    for (int i = 0; tp_cuda_dtype_name(i) != nullptr; i++)
        names.emplace_back(tp_cuda_dtype_name(i));
    return names;
}

} // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module)
{
    module.doc() = "trainparity CUDA compare, digest and summary kernels (csrc/cuda)";
    module.def("compare", &compare, py::arg("baseline"), py::arg("candidate"), py::arg("dtype"),
               py::arg("rtol"), py::arg("atol"), py::arg("equal_nan"), py::arg("stream"),
               py::arg("block_threads") = 0, py::arg("grid_blocks") = 0,
               "The C core's compare result tuple for two contiguous CUDA tensors' bytes.");
    module.def("digest", &digest, py::arg("data"), py::arg("stream"),
               py::arg("block_threads") = 0, py::arg("grid_blocks") = 0, py::arg("version") = 2,
               "The C core's 16-byte digest (version 1 or 2) of a contiguous CUDA tensor's "
               "bytes.");
    module.def("digest_summary", &digest_summary, py::arg("data"), py::arg("dtype"),
               py::arg("stream"), py::arg("block_threads") = 0, py::arg("grid_blocks") = 0,
               py::arg("version") = 2,
               "The C core's digest_summary() of a contiguous CUDA tensor: (16-byte digest, "
               "(count, sum, sum_squares, max_abs, nan_count, inf_count)).");
    module.def("dtypes", &dtypes, "Names of the dtypes the kernels compare.");
}
