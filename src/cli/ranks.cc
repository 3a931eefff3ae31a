#include "cli/ranks.h"

#include <pthread.h>

#include <csignal>
#include <cinttypes>
#include <cstdio>
#include <memory>

#include "dist/communicator.h"
#include "model/model.h"
#include "model/tensor_parallel.h"

namespace pagoda::cli {
namespace {

std::unique_ptr<Communicator> g_world;
bool g_leading = false;  // rank 0 loaded a split model: the others follow it

}  // namespace

Ranks::Ranks() {
  if (!launched_as_ranks()) return;
  // MPI starts threads of its own; they must not take SIGINT / SIGTERM (its default action
  // would end the process where serve shuts down in order): they start with both blocked.
  sigset_t set, before;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, &before);
  g_world = mpi_world();
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
}

// This process's peak resident memory (VmHWM), in bytes; 0 where /proc does not say.
uint64_t peak_resident_bytes() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return 0;
  char line[256];
  uint64_t kib = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::sscanf(line, "VmHWM: %" SCNu64 " kB", &kib) == 1) break;
  }
  std::fclose(f);
  return kib * 1024;
}

Ranks::~Ranks() {
  if (!g_world) return;
  if (g_leading) send_stop(*g_world);
  // One line per rank: what tensor parallelism cost it (bench/tensor_parallel.py reads these).
  const Communicator::Stats s = g_world->stats();
  if (s.num_all_reduces > 0) {
    std::fprintf(stderr,
                 "rank %d of %d: peak resident %.1f MiB, %lld all-reduces, %.3f s in them "
                 "(%.1f us each)\n",
                 g_world->rank(), g_world->size(), double(peak_resident_bytes()) / 1048576.0,
                 static_cast<long long>(s.num_all_reduces), s.all_reduce_s,
                 1e6 * s.all_reduce_s / double(s.num_all_reduces));
  }
  g_world.reset();
}

Communicator* ranks() { return g_world.get(); }

bool is_follower() { return g_world && !g_world->leader(); }

bool follow_rank0(Model& model, Backend& backend) {
  Communicator* tp = model.tensor_parallel();
  if (tp == nullptr) return false;
  if (tp->leader()) {
    g_leading = true;
    return false;
  }
  follow_steps(model, backend);
  return true;
}

void end_ranks_on_error(int code) {
  if (!g_world) return;
  std::fflush(stderr);
  g_world->abort(code);
}

}  // namespace pagoda::cli
