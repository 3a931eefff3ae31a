// The backend seam without a GPU: a backend whose memory the host cannot touch. FencedBackend
// runs the reference backend's ops, but keeps every buffer it allocated (activations, logits,
// the KV cache) mprotect'ed PROT_NONE except while one of its own operations runs, and says it
// is not host_visible(). A model, engine or sampler that reads or writes that memory on the
// host instead of through the backend (upload, download, gather_rows, copy_blocks) dies with
// SIGSEGV; one that goes through the backend gives the reference backend's ids exactly.
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <memory>
#include <mutex>
#include <set>

#include "conformance/engine_harness.h"
#include "core/error.h"
#include "tools/synth.h"
#include "test_util.h"

namespace pagoda {
namespace {

class FencedBackend final : public Backend {
 public:
  struct Fence {
    std::mutex mutex;
    std::set<std::pair<void*, size_t>> live;  // every buffer's pages
  };

  class Buffer final : public BackendBuffer {
   public:
    Buffer(std::shared_ptr<Fence> fence, uint64_t bytes) : fence_(std::move(fence)) {
      const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
      size_ = (static_cast<size_t>(bytes) + page - 1) / page * page;
      data_ = mmap(nullptr, size_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (data_ == MAP_FAILED) fail("fenced backend: mmap of ", size_, " bytes failed");
      std::lock_guard lock(fence_->mutex);
      fence_->live.insert({data_, size_});
    }
    ~Buffer() override {
      {
        std::lock_guard lock(fence_->mutex);
        fence_->live.erase({data_, size_});
      }
      munmap(data_, size_);
    }
    void* data() const override { return data_; }
    uint64_t bytes() const override { return size_; }

   private:
    std::shared_ptr<Fence> fence_;
    void* data_ = nullptr;
    size_t size_ = 0;
  };

  std::string name() const override { return "fenced"; }
  bool host_visible() const override { return false; }
  std::unique_ptr<BackendBuffer> allocate(uint64_t bytes, const char*) override {
    return std::make_unique<Buffer>(fence_, bytes);
  }
  void upload(const void* host, uint64_t bytes, void* dst) override {
    open([&] { inner_->upload(host, bytes, dst); });
  }
  void download(const void* src, uint64_t bytes, void* host) override {
    open([&] { inner_->download(src, bytes, host); });
  }
  void gather_rows(const float* x, std::span<const int32_t> rows, int64_t width, float* out) override {
    open([&] { inner_->gather_rows(x, rows, width, out); });
  }
  void add_scaled_rows(const float* y, std::span<const int32_t> rows, std::span<const float> weights,
                       int64_t width, float* out) override {
    open([&] { inner_->add_scaled_rows(y, rows, weights, width, out); });
  }
  void copy_blocks(KvLayer cache, uint64_t block_bytes, std::span<const BlockCopy> copies) override {
    ++num_block_copies;
    open([&] { inner_->copy_blocks(cache, block_bytes, copies); });
  }
  void prepare(const WeightMatrix& w) override { inner_->prepare(w); }
  void embed(const WeightMatrix& t, const int32_t* ids, int64_t n, float* out) override {
    open([&] { inner_->embed(t, ids, n, out); });
  }
  void matmul(const WeightMatrix& w, const float* x, int64_t n, float* y) override {
    open([&] { inner_->matmul(w, x, n, y); });
  }
  void rms_norm(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* y) override {
    open([&] { inner_->rms_norm(x, w, rows, dim, eps, y); });
  }
  void rope(float* x, const int32_t* pos, int64_t n, int64_t heads, int64_t hd, const RopeParams& p) override {
    open([&] { inner_->rope(x, pos, n, heads, hd, p); });
  }
  void write_kv(const float* k, const float* v, const AttentionBatch& b, const AttentionParams& p,
                KvLayer cache) override {
    open([&] { inner_->write_kv(k, v, b, p, cache); });
  }
  void attention(const float* q, KvLayer cache, const AttentionBatch& b, const AttentionParams& p,
                 float* out) override {
    open([&] { inner_->attention(q, cache, b, p, out); });
  }
  void silu_mul(const float* g, const float* u, int64_t n, float* out) override {
    open([&] { inner_->silu_mul(g, u, n, out); });
  }
  void gelu_mul(const float* g, const float* u, int64_t n, float* out) override {
    open([&] { inner_->gelu_mul(g, u, n, out); });
  }
  void add(float* x, const float* y, int64_t n) override { open([&] { inner_->add(x, y, n); }); }
  void add_bias(float* x, const float* b, int64_t rows, int64_t dim) override {
    open([&] { inner_->add_bias(x, b, rows, dim); });
  }
  void scale(float* x, float s, int64_t n) override { open([&] { inner_->scale(x, s, n); }); }

  int64_t num_block_copies = 0;

 private:
  // Every buffer readable and writable while `op` runs, and no longer.
  template <class Op>
  void open(Op&& op) {
    protect(PROT_READ | PROT_WRITE);
    op();
    protect(PROT_NONE);
  }
  void protect(int mode) {
    std::lock_guard lock(fence_->mutex);
    for (const auto& [p, size] : fence_->live) {
      if (mprotect(p, size, mode) != 0) fail("fenced backend: mprotect failed");
    }
  }

  std::unique_ptr<Backend> inner_ = make_reference_backend();
  std::shared_ptr<Fence> fence_ = std::make_shared<Fence>();
};

TEST(FencedBackendDeathTest, TheHostCannotTouchItsMemory) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  FencedBackend fenced;
  const auto buffer = fenced.allocate(64, "test");
  float value = 3.0f;
  fenced.upload(&value, sizeof value, buffer->data());  // through the backend: fine
  float back = 0.0f;
  fenced.download(buffer->data(), sizeof back, &back);
  EXPECT_EQ(back, 3.0f);
  EXPECT_DEATH(static_cast<volatile float*>(buffer->data())[0] = 1.0f, "");
  EXPECT_DEATH(back = static_cast<volatile float*>(buffer->data())[0], "");
}

// Requests batched with chunked prefill (the last layer narrowed to the rows that want logits),
// prefix hits, and a forked request (copy-on-write): the ids the reference backend gives alone.
void check_engine_through_the_seam(const std::string& path, KvType kv_type) {
  LoadedModel m = load(path);
  const std::vector<GenerationRequest> requests = make_requests(m, 6, 40, 12);
  auto ref = make_reference_backend();
  FencedBackend fenced;
  EngineConfig alone = config_with(4096, false);
  alone.kv_type = kv_type;
  EngineConfig batched = config_with(4096, true, 32);
  batched.kv_type = kv_type;
  const auto expected = ids_of(run(*m.model, *ref, alone, requests, Arrival::kAlone));
  EXPECT_EQ(ids_of(run(*m.model, fenced, batched, requests, Arrival::kStaggered)), expected);

  // A prompt that ends inside a block: its tail is copied for the second sample.
  size_t i = 0;
  while (i < requests.size() && requests[i].prompt.size() % 16 == 0) ++i;
  ASSERT_LT(i, requests.size());
  GenerationRequest forked = requests[i];
  forked.n = 2;
  const RunResult two = run(*m.model, fenced, batched, {forked}, Arrival::kAlone);
  EXPECT_GT(fenced.num_block_copies, 0);
  ASSERT_EQ(two.samples[0].size(), 2u);
  EXPECT_EQ(two.samples[0][0].ids, expected[i]);
  EXPECT_EQ(two.samples[0][1].ids, expected[i]);
}

TEST(FencedBackend, Stories260KThroughTheSeam) {
  PAGODA_SHARED_OR_SKIP(shared, "");
  for (KvType type : {KvType::kF32, KvType::kF16, KvType::kQ8_0}) {
    SCOPED_TRACE(std::string(kv_type_info(type).name));
    check_engine_through_the_seam(stories260k(shared), type);
  }
}

// Gemma 3 (its own forward: embedding scale, sandwich norms, local layers), Qwen3 (Q/K norm),
// and the mixture-of-experts blocks of Mixtral and Qwen3-MoE (the routing on the host from
// downloaded logits, each expert's tokens gathered and added back by the backend).
TEST(FencedBackend, SyntheticFamiliesThroughTheSeam) {
  PAGODA_SHARED_OR_SKIP(vocab, "models/stories260K.gguf");
  for (const char* preset : {"gemma3-tiny", "qwen3-tiny", "mixtral-tiny", "qwen3-moe-tiny"}) {
    SCOPED_TRACE(preset);
    SynthOptions o;
    o.preset = preset;
    o.type = "f32";
    o.vocab_path = vocab;
    o.output_path = test::temp_dir() + "/" + preset + ".gguf";
    write_synthetic_model(o, {});
    check_engine_through_the_seam(o.output_path, KvType::kF16);
  }
}

}  // namespace
}  // namespace pagoda
