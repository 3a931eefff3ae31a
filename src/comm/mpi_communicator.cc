#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.h"
#include "comm/communicator.h"

#ifdef PAGODA_WITH_MPI
#include <mpi.h>
#endif

namespace pagoda {

bool launched_as_ranks() {
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (size == nullptr) size = std::getenv("PMI_SIZE");
  return size != nullptr && std::atoi(size) > 1;
}

#ifdef PAGODA_WITH_MPI
namespace {

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(rc, text, &length);
  fail("MPI ", what, ": ", std::string(text, static_cast<size_t>(length)));
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator() {
    int provided = 0;
    // One thread at a time talks to the other ranks: the engine's (which under serve is not the
    // main thread), then the main thread's at the end.
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "init");
    if (provided < MPI_THREAD_SERIALIZED) {
      fail("MPI: this MPI library does not allow calls from more than one thread");
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  ~MpiCommunicator() override { MPI_Finalize(); }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void all_reduce_sum(float* data, size_t count) override {
    const double start = MPI_Wtime();
    check(MPI_Allreduce(MPI_IN_PLACE, data, checked_int(count), MPI_FLOAT, MPI_SUM,
                        MPI_COMM_WORLD),
          "all-reduce");
    stats_.all_reduce_s += MPI_Wtime() - start;
    ++stats_.num_all_reduces;
  }

  void broadcast(void* data, size_t bytes) override {
    check(MPI_Bcast(data, checked_int(bytes), MPI_BYTE, 0, MPI_COMM_WORLD), "broadcast");
  }

  void gather(std::span<const float> send, std::span<float> recv,
              std::span<const size_t> counts) override {
    std::vector<int> sizes, offsets;
    if (rank_ == 0) {
      int offset = 0;
      for (size_t c : counts) {
        sizes.push_back(checked_int(c));
        offsets.push_back(offset);
        offset += sizes.back();
      }
    }
    check(MPI_Gatherv(send.data(), checked_int(send.size()), MPI_FLOAT, recv.data(),
                      sizes.data(), offsets.data(), MPI_FLOAT, 0, MPI_COMM_WORLD),
          "gather");
  }

  [[noreturn]] void abort(int code) override {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);
  }

 private:
  static int checked_int(size_t n) {
    if (n > size_t{2147483647}) fail("MPI: a message of ", n, " elements is too large");
    return static_cast<int>(n);
  }

  int rank_ = 0, size_ = 1;
};

}  // namespace

std::unique_ptr<Communicator> mpi_world() { return std::make_unique<MpiCommunicator>(); }

#else

std::unique_ptr<Communicator> mpi_world() {
  fail("this pagoda was built without MPI, so it cannot run as several ranks: install "
       "OpenMPI (scripts/setup does) and build again");
}

#endif

}  // namespace pagoda
