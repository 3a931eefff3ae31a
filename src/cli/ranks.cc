#include "cli/ranks.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "comm/communicator.h"
#include "model/model.h"
#include "model/tensor_parallel.h"

namespace pagoda::cli {
namespace {

std::unique_ptr<Communicator> g_world;
bool g_leading = false;  // rank 0 loaded a split model: the others follow it

// Rank 0 holds a TCP connection from every other rank: the kernel closes a process's sockets
// when it ends, so a rank that dies shows at once as an end of stream, without waiting on MPI
// (whose collectives would wait for it forever) or on mpirun.
class RankWatch {
 public:
  explicit RankWatch(Communicator& world) : world_(world) {
    if (world.leader()) {
      lead();
    } else {
      join();
    }
  }

  ~RankWatch() {
    stopping_ = true;
    if (wake_[1] >= 0) {
      const char c = 0;
      [[maybe_unused]] ssize_t n = ::write(wake_[1], &c, 1);
    }
    if (thread_.joinable()) thread_.join();
    for (int fd : fds_) ::close(fd);
    for (int fd : wake_) {
      if (fd >= 0) ::close(fd);
    }
  }

  // Before rank 0 tells the others to stop: their connections ending is no failure then.
  void expect_ends() { stopping_ = true; }

  void set_handler(std::function<void(int, int)> h) {
    std::lock_guard lock(mutex_);
    handler_ = std::move(h);
  }

 private:
  // Rank 0: listens on every interface, tells the others its port and addresses, takes one
  // connection from each.
  void lead() {
    const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    socklen_t len = sizeof a;
    if (listener < 0 || ::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::listen(listener, world_.size()) != 0 ||
        ::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      fail("tensor parallel: rank 0 cannot listen for the other ranks: ", std::strerror(errno));
    }
    std::string where = std::to_string(ntohs(a.sin_port));
    ifaddrs* list = nullptr;
    if (::getifaddrs(&list) == 0) {
      for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
        if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
        char text[INET_ADDRSTRLEN];
        const auto* in = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
        if (::inet_ntop(AF_INET, &in->sin_addr, text, sizeof text)) where += std::string(" ") + text;
      }
      ::freeifaddrs(list);
    }
    share(where);
    fds_.assign(static_cast<size_t>(world_.size()), -1);
    for (int joined = 1; joined < world_.size(); ++joined) {
      pollfd p{listener, POLLIN, 0};
      if (::poll(&p, 1, 60000) != 1) fail("tensor parallel: the other ranks did not reach rank 0");
      const int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
      int32_t rank = -1;
      if (fd < 0 || ::recv(fd, &rank, sizeof rank, MSG_WAITALL) != sizeof rank || rank < 1 ||
          rank >= world_.size() || fds_[static_cast<size_t>(rank)] >= 0) {
        fail("tensor parallel: a bad connection to rank 0 while the ranks started");
      }
      fds_[static_cast<size_t>(rank)] = fd;
    }
    ::close(listener);
    if (::pipe2(wake_, O_CLOEXEC) != 0) fail("tensor parallel: pipe: ", std::strerror(errno));
    thread_ = std::thread([this] { watch(); });
  }

  // The other ranks: connect to rank 0 at the first of its addresses that answers.
  void join() {
    const std::string where = share("");
    std::istringstream words(where);
    int port = 0;
    words >> port;
    for (std::string ip; words >> ip;) {
      const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(static_cast<uint16_t>(port));
      const int32_t rank = world_.rank();
      if (::inet_pton(AF_INET, ip.c_str(), &a.sin_addr) == 1 &&
          ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
          ::send(fd, &rank, sizeof rank, MSG_NOSIGNAL) == sizeof rank) {
        fds_.push_back(fd);  // held open until this process ends
        return;
      }
      ::close(fd);
    }
    fail("tensor parallel: rank ", world_.rank(), " cannot reach rank 0 at port ", where);
  }

  // Rank 0's `text` to every rank.
  std::string share(std::string text) {
    int64_t size = static_cast<int64_t>(text.size());
    world_.broadcast(&size, sizeof size);
    text.resize(static_cast<size_t>(size));
    world_.broadcast(text.data(), text.size());
    return text;
  }

  void watch() {
    std::vector<pollfd> p;
    p.push_back({wake_[0], POLLIN, 0});
    for (int r = 1; r < world_.size(); ++r) p.push_back({fds_[static_cast<size_t>(r)], POLLIN, 0});
    while (!stopping_) {
      if (::poll(p.data(), p.size(), -1) < 0) continue;
      if (p[0].revents || stopping_) return;
      for (size_t i = 1; i < p.size(); ++i) {
        if (p[i].revents == 0) continue;
        char c;
        if (::recv(p[i].fd, &c, 1, MSG_DONTWAIT) > 0) continue;  // nothing is ever sent
        if (stopping_) return;
        const int rank = static_cast<int>(i);
        std::function<void(int, int)> handler;
        {
          std::lock_guard lock(mutex_);
          handler = handler_;
        }
        if (handler) {
          handler(rank, world_.size());
        } else {
          std::fprintf(stderr, "error: tensor parallel: rank %d of %d is gone (its process "
                       "ended); ending\n", rank, world_.size());
        }
        std::fflush(stderr);
        std::_Exit(1);
      }
    }
  }

  Communicator& world_;
  std::vector<int> fds_;
  int wake_[2] = {-1, -1};
  std::atomic<bool> stopping_{false};
  std::thread thread_;
  std::mutex mutex_;
  std::function<void(int, int)> handler_;
};

std::unique_ptr<RankWatch> g_watch;

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
  g_watch = std::make_unique<RankWatch>(*g_world);
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
  if (g_watch) g_watch->expect_ends();
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
  g_watch.reset();
  g_world.reset();
}

void on_rank_lost(std::function<void(int rank, int size)> handler) {
  if (g_watch) g_watch->set_handler(std::move(handler));
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
