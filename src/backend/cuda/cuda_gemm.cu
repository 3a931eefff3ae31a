// Products of many tokens on the tensor cores through cuBLAS, opened at run time (dlopen) so
// that the program needs libcublas only to use it: where it is missing, or PAGODA_CUBLAS=0,
// the products stay on cuda_kernels.cu's own kernels. Quantized weights are decoded to F16 into
// a scratch matrix first (one pass over the weights, paid once per product of many tokens),
// the activations converted to F16 (BF16 for BF16 weights), and cuBLAS accumulates in F32.
#include <cublas_v2.h>
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <type_traits>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_units.cuh"
#include "core/error.h"

namespace pagoda::cuda {
namespace {

struct Blas {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  // cublasGemmEx (the header overloads the name, so its type is spelled out).
  cublasStatus_t (*gemm)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                         const void*, const void*, cudaDataType, int, const void*, cudaDataType,
                         int, const void*, void*, cudaDataType, int, cublasComputeType_t,
                         cublasGemmAlgo_t) = nullptr;
};

const Blas* open_blas() {
  static const Blas* blas = []() -> const Blas* {
    const char* off = std::getenv("PAGODA_CUBLAS");
    if (off != nullptr && std::strcmp(off, "0") == 0) return nullptr;
    void* lib = nullptr;
    for (const char* name : {"libcublas.so.13", "libcublas.so.12", "libcublas.so",
                             "/usr/local/cuda/lib64/libcublas.so.13",
                             "/usr/local/cuda/lib64/libcublas.so"}) {
      if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
    }
    if (lib == nullptr) return nullptr;
    auto* b = new Blas;
    b->create = reinterpret_cast<decltype(b->create)>(dlsym(lib, "cublasCreate_v2"));
    b->destroy = reinterpret_cast<decltype(b->destroy)>(dlsym(lib, "cublasDestroy_v2"));
    b->set_stream = reinterpret_cast<decltype(b->set_stream)>(dlsym(lib, "cublasSetStream_v2"));
    b->gemm = reinterpret_cast<decltype(b->gemm)>(dlsym(lib, "cublasGemmEx"));
    if (!b->create || !b->destroy || !b->set_stream || !b->gemm) return nullptr;
    return b;
  }();
  return blas;
}

void check_blas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) fail("cuBLAS: ", what, " failed (status ", int(status), ")");
}

template <DType T>
__global__ void dequantize_kernel(const uint8_t* w, uint64_t row_bytes, int64_t rows,
                                  int64_t units_per_row, __half* out) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= rows * units_per_row) return;
  const int64_t r = idx / units_per_row, u = idx % units_per_row;
  float v[kUnit];
  unit_values<T>(w + row_bytes * static_cast<uint64_t>(r), u, v);
  auto* dst = reinterpret_cast<uint4*>(out + idx * kUnit);
#pragma unroll
  for (int i = 0; i < kUnit / 8; ++i) {
    uint32_t words[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const __half2 pair = __floats2half2_rn(v[8 * i + 2 * k], v[8 * i + 2 * k + 1]);
      words[k] = *reinterpret_cast<const uint32_t*>(&pair);
    }
    dst[i] = make_uint4(words[0], words[1], words[2], words[3]);
  }
}

template <typename H>
__global__ void convert_kernel(const float* x, int64_t n, H* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) {
    if constexpr (std::is_same_v<H, __half>) {
      out[i] = __float2half_rn(x[i]);
    } else {
      out[i] = __float2bfloat16_rn(x[i]);
    }
  }
}

template <DType T>
void dequantize(cudaStream_t s, const uint8_t* w, uint64_t row_bytes, int64_t rows, int64_t cols,
                __half* out) {
  const int64_t total = rows * (cols / kUnit);
  dequantize_kernel<T><<<static_cast<unsigned>((total + 255) / 256), 256, 0, s>>>(
      w, row_bytes, rows, cols / kUnit, out);
}

}  // namespace

bool blas_available() { return open_blas() != nullptr; }

struct GemmContext::Handle {
  cublasHandle_t handle = nullptr;
};

GemmContext::GemmContext() = default;
GemmContext::~GemmContext() {
  // A handle holds device workspace: a backend made per test or per run must give it back.
  // The backend's stream may be gone by now, so the handle is pointed at the default one first.
  if (handle_ && handle_->handle != nullptr) {
    open_blas()->set_stream(handle_->handle, nullptr);
    open_blas()->destroy(handle_->handle);
  }
}

uint64_t GemmContext::scratch_bytes(DType type, int64_t rows, int64_t cols, int64_t n) {
  const uint64_t x = static_cast<uint64_t>(n * cols) * 2;
  if (type == DType::kF32) return 0;
  if (type == DType::kF16 || type == DType::kBF16) return x;
  return x + static_cast<uint64_t>(rows * cols) * 2;
}

void GemmContext::run(cudaStream_t s, DType type, const uint8_t* w, uint64_t row_bytes,
                      int64_t rows, int64_t cols, const float* x, int64_t n, void* scratch,
                      float* y) {
  const Blas* blas = open_blas();
  if (blas == nullptr) fail("cuBLAS is not available");
  if (!handle_) {
    handle_ = std::make_unique<Handle>();
    check_blas(blas->create(&handle_->handle), "cublasCreate");
  }
  check_blas(blas->set_stream(handle_->handle, s), "cublasSetStream");
  const float one = 1.0f, zero = 0.0f;
  const void* a = w;
  const void* b = x;
  cudaDataType_t ab_type = CUDA_R_32F;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  auto* x_half = static_cast<uint8_t*>(scratch);
  const int64_t count = n * cols;
  const unsigned blocks = static_cast<unsigned>((count + 255) / 256);
  if (type == DType::kBF16) {
    convert_kernel<<<blocks, 256, 0, s>>>(x, count, reinterpret_cast<__nv_bfloat16*>(x_half));
    b = x_half;
    ab_type = CUDA_R_16BF;
  } else if (type != DType::kF32) {
    convert_kernel<<<blocks, 256, 0, s>>>(x, count, reinterpret_cast<__half*>(x_half));
    b = x_half;
    ab_type = CUDA_R_16F;
    if (type != DType::kF16) {
      auto* w_half = reinterpret_cast<__half*>(x_half + static_cast<uint64_t>(count) * 2);
      by_device_type(type, [&]<DType T>() {
        dequantize<T>(s, w, row_bytes, rows, cols, w_half);
      });
      a = w_half;
    }
  }
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) fail("CUDA: gemm inputs: ", cudaGetErrorString(e));
  counts().launches += type == DType::kF32 ? 1 : type == DType::kF16 || type == DType::kBF16 ? 2 : 3;
  // Row-major y[n, rows] = x[n, cols] W^T is column-major y^T = W^T' x^T with W read as the
  // column-major cols x rows matrix it is in memory, transposed.
  check_blas(blas->gemm(handle_->handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(rows),
                        static_cast<int>(n), static_cast<int>(cols), &one, a, ab_type,
                        static_cast<int>(cols), b, ab_type, static_cast<int>(cols), &zero, y,
                        CUDA_R_32F, static_cast<int>(rows), compute, CUBLAS_GEMM_DEFAULT),
             "cublasGemmEx");
}

}  // namespace pagoda::cuda
