#include "backend/backend_choice.h"

#include "backend/cuda/cuda_backend.h"
#include "core/error.h"

namespace pagoda {

std::vector<std::string> backend_names() { return {"cpu", "reference", "cuda"}; }

std::string backend_help() {
  std::string cuda = "not built";
  if (cuda_backend_built()) {
    const int devices = cuda_device_count();
    cuda = devices == 0 ? "built, no device here" : std::to_string(devices) + " device(s) here";
  }
  return "cpu (SIMD, every core), reference (the scalar oracle, slow) or cuda (one NVIDIA GPU: " +
         cuda + ")";
}

std::unique_ptr<Backend> make_backend(const std::string& name, int threads) {
  return make_backend(name, threads, nullptr);
}

std::unique_ptr<Backend> make_backend(const std::string& name, int threads,
                                      const std::shared_ptr<CpuThreads>& cpu_threads) {
  if (name == "cpu") return cpu_threads ? make_cpu_backend(cpu_threads) : make_cpu_backend(threads);
  if (name == "reference") return make_reference_backend();
  if (name == "cuda") return make_cuda_backend(0);
  fail("unknown backend '", name, "': use cpu, reference or cuda");
}

}  // namespace pagoda
