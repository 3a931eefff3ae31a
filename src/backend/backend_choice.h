// The backends a command runs on, by the name `--backend` (alias `--device`) takes: one list
// for run, chat, serve and bench.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace pagoda {

// "cpu", "reference", "cuda".
std::vector<std::string> backend_names();
// The option's help: each name, and whether this build and machine have a CUDA device.
std::string backend_help();
// The backend called `name` (threads: the CPU backend's, 0 for every core). Throws Error for
// an unknown name or a CUDA backend this build or machine does not have.
std::unique_ptr<Backend> make_backend(const std::string& name, int threads);
// The same, a CPU backend running on `cpu_threads` (shared with other backends) when given.
std::unique_ptr<Backend> make_backend(const std::string& name, int threads,
                                      const std::shared_ptr<CpuThreads>& cpu_threads);

}  // namespace pagoda
