// The CUDA backend: the model's ops on one NVIDIA GPU, its activations, logits and KV cache in
// device memory (Backend::allocate), weights uploaded once (Backend::prepare) in their stored
// type. Built when CMake finds nvcc (PAGODA_CUDA, for sm_80 and sm_90); elsewhere these
// functions say it is not built. Plan and status: docs/CUDA.md.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"

namespace pagoda {

// Whether this build has the CUDA backend.
bool cuda_backend_built();
// Whether products of many tokens can go to cuBLAS (found at run time; PAGODA_CUBLAS=0 says no).
bool cuda_blas_available();
// The product kernels' decoder of 32 weights (cuda_units.cuh) run on the host, so that it is
// tested against the reference without a GPU: out[e] = element 32 * unit + e of `row`. False
// when this build has no CUDA backend or the type no device decoder.
bool cuda_unit_values_on_host(DType type, const uint8_t* row, int64_t unit, float* out);
// The device work counted so far (launches, host syncs, cudaMalloc / cudaMemset calls, uploads,
// downloads) as one JSON object; a backend prints it to stderr when it is destroyed if
// PAGODA_CUDA_COUNTS is set. "{}" when not built.
std::string cuda_counts_json();
// GPUs the CUDA runtime sees: 0 when not built, without a driver or without a device.
int cuda_device_count();
// "NVIDIA H200 (sm_90, 139.8 GiB)"; throws Error when there is no such device.
std::string cuda_device_description(int device);
// Throws Error (why, in one line) when the backend is not built or the device is absent.
std::unique_ptr<Backend> make_cuda_backend(int device);

}  // namespace pagoda
