#include "cli/ranks.h"

#include <pthread.h>

#include <csignal>
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

Ranks::~Ranks() {
  if (g_world && g_leading) send_stop(*g_world);
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
