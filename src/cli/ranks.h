// `mpirun -np N pagoda run|serve ...`: every rank runs the same command line; each loads its
// slice of the model (model/tensor_parallel.h). Rank 0 goes on with the command (the engine, the
// server); the others follow its steps until it is done.
#pragma once

#include <functional>

namespace pagoda {
class Backend;
class Communicator;
class Model;
}  // namespace pagoda

namespace pagoda::cli {

// For the life of main(): starts MPI when mpirun started this process as one of several ranks;
// at the end rank 0 tells the ranks that follow it to stop.
class Ranks {
 public:
  Ranks();
  ~Ranks();
  Ranks(const Ranks&) = delete;
  Ranks& operator=(const Ranks&) = delete;
};

// The ranks, or null for one process.
Communicator* ranks();
// One of several ranks, not rank 0.
bool is_follower();

// Ranks other than 0 follow rank 0's steps on `model` and return true once it is done (the
// command ends there); rank 0 and a single process get false and go on.
bool follow_rank0(Model& model, Backend& backend);

// Rank 0 learns at once when another rank's process ends, however it ends (killed, out of
// memory): `handler` runs then, on a thread of its own, with that rank. Without one, rank 0
// prints one line naming the rank and exits 1. Not called for ranks that end because rank 0
// told them to.
void on_rank_lost(std::function<void(int rank, int size)> handler);

// After an error: with several ranks, ends them all with `code` (one rank's failure would leave
// the others waiting on it); otherwise returns.
void end_ranks_on_error(int code);

}  // namespace pagoda::cli
