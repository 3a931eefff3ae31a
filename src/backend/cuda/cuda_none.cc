// The CUDA backend's entry points in a build without it (no nvcc found, or PAGODA_CUDA=OFF).
#ifndef PAGODA_HAVE_CUDA

#include "backend/cuda/cuda_backend.h"
#include "core/error.h"

namespace pagoda {

bool cuda_backend_built() { return false; }
bool cuda_blas_available() { return false; }
bool cuda_unit_values_on_host(DType, const uint8_t*, int64_t, float*) { return false; }
std::string cuda_counts_json() { return "{}"; }
int cuda_device_count() { return 0; }
std::string cuda_device_description(int device) {
  fail("this pagoda was built without the CUDA backend (no nvcc found; see docs/CUDA.md)");
}
std::unique_ptr<Backend> make_cuda_backend(int device) {
  fail("this pagoda was built without the CUDA backend (no nvcc found; see docs/CUDA.md)");
}

}  // namespace pagoda

#endif
