// The collective operations tensor parallelism needs between the ranks that each hold a slice
// of one model: a sum across ranks (after the row-parallel projections), a broadcast of the step
// rank 0 planned, and a gather of the logit slices to rank 0. An MPI implementation is built
// when OpenMPI is found; an NCCL one would implement the same three calls on device buffers,
// and nothing above this interface changes (docs/TENSOR_PARALLEL.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

namespace pagoda {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  bool leader() const { return rank() == 0; }

  // data[i] = the sum over ranks of data[i], on every rank.
  virtual void all_reduce_sum(float* data, size_t count) = 0;
  // Rank 0's `bytes` bytes at `data` to every rank.
  virtual void broadcast(void* data, size_t bytes) = 0;
  // Rank 0 receives every rank's `send` concatenated in rank order into `recv` (counts[r]
  // floats from rank r); other ranks pass an empty `recv`.
  virtual void gather(std::span<const float> send, std::span<float> recv,
                      std::span<const size_t> counts) = 0;
  // Ends every rank with `code` (a rank that failed alone would leave the others waiting).
  [[noreturn]] virtual void abort(int code) = 0;

  // What the sums across ranks cost this rank so far (the figure tensor parallelism adds).
  struct Stats {
    int64_t num_all_reduces = 0;
    double all_reduce_s = 0;
  };
  Stats stats() const { return stats_; }

 protected:
  Stats stats_;
};

// Whether this process was started by mpirun (OpenMPI's environment says so) with more than one
// rank.
bool launched_as_ranks();

// The world of mpirun's ranks: initialises MPI (finalised when the returned object goes).
// Throws Error when this build has no MPI.
std::unique_ptr<Communicator> mpi_world();

}  // namespace pagoda
