// Randomized add / step / abort / fork / speculate sequences under small block budgets, run
// against a fake model with a fake KV cache: each scheduled token (proposals included) is written
// into the slot its block table names, and every step reads each scheduled request's whole
// sequence back through its table; proposals are verified against the fake model's own
// continuation, so rejected ones are rolled back (KvCacheManager::truncate).
// The next token is a hash of what was read, so a wrong prefix-cache hit, a missing
// copy-on-write or a block freed while in use changes the output. One request in five is
// prompt-only (an embedding): it must compute its whole prompt, sample nothing and finish.
// Checked after every step:
// the scheduler's invariants, the budget and max_num_seqs, that no one writes into a shared or
// cached block; at the end: every request finished or was aborted, no block leaked, and every
// finished output equals the output of the same request generated alone. Half the runs have a
// lower tier under the pool (FakeTier: bounded, and now and then a record does not read; its
// loads land some steps after they start, their blocks holding junk until then), whose blocks
// come back through the same reads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/error.h"
#include "kv/host_tier.h"
#include "sched/scheduler.h"

namespace pagoda {
namespace {

constexpr TokenId kVocab = 32;  // small, so stop ids are sampled now and then

// The fake model's next token after a sequence.
TokenId fake_next(std::span<const TokenId> seq) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (TokenId t : seq) {
    h ^= static_cast<uint32_t>(t);
    h *= 1099511628211ULL;
  }
  h ^= h >> 29;
  return static_cast<TokenId>(h % kVocab);
}

// What the request generates when nothing else runs: the reference output.
std::vector<TokenId> alone_output(const Sequence& r, SequenceStatus* status) {
  std::vector<TokenId> seq = r.prompt;
  std::vector<TokenId> out;
  for (;;) {
    const TokenId t = fake_next(seq);
    out.push_back(t);
    seq.push_back(t);
    if (std::find(r.stop_ids.begin(), r.stop_ids.end(), t) != r.stop_ids.end()) {
      *status = SequenceStatus::kFinishedStopped;
      return out;
    }
    if (static_cast<int32_t>(out.size()) >= r.max_tokens) {
      *status = SequenceStatus::kFinishedLength;
      return out;
    }
  }
}

class FakeModel {
 public:
  FakeModel(int32_t num_blocks, int32_t block_size)
      : block_size_(block_size), slots_(static_cast<size_t>(num_blocks * block_size)) {}

  // One engine step: block copies, then the K/V writes of every scheduled token, then each
  // request "attends" to its positions [0, end) through its block table. Returns, per sampling
  // request in plan order, its accepted proposals and the token after them.
  std::vector<std::vector<TokenId>> run(const StepPlan& plan, const Scheduler& s) {
    for (const BlockCopy& c : plan.block_copies) {
      std::copy_n(slots_.begin() + c.src * block_size_, block_size_,
                  slots_.begin() + c.dst * block_size_);
    }
    auto token_at = [](const ScheduledSequence& r, const TokenSequence& seq, int32_t p) {
      const int32_t known_end = r.start_position + r.num_new_tokens - r.num_proposed;
      return p < known_end ? seq[p] : r.proposed[static_cast<size_t>(p - known_end)];
    };
    for (const ScheduledSequence& r : plan.sequences) {
      const Sequence& req = *s.find(r.seq_id);
      const TokenSequence seq = req.tokens();
      for (int32_t p = r.start_position; p < r.start_position + r.num_new_tokens; ++p) {
        const BlockId b = r.block_table[static_cast<size_t>(p / block_size_)];
        if (s.kv().pool().ref_count(b) != 1 || s.kv().pool().is_hashed(b)) {
          record("request ", r.seq_id, " writes position ", p, " into shared or cached block ", b);
        }
        slot(b, p) = {token_at(r, seq, p), p};
      }
    }
    std::vector<std::vector<TokenId>> sampled;
    std::vector<TokenId> read;
    for (const ScheduledSequence& r : plan.sequences) {
      const Sequence& req = *s.find(r.seq_id);
      const TokenSequence seq = req.tokens();
      const int32_t end = r.start_position + r.num_new_tokens;
      read.clear();
      for (int32_t p = 0; p < end; ++p) {
        const Slot& got = slot(r.block_table[static_cast<size_t>(p / block_size_)], p);
        if (got.position != p || got.token != token_at(r, seq, p)) {
          record("request ", r.seq_id, " reads position ", p, ": token ", got.token, " from ",
                 got.position, ", expected ", token_at(r, seq, p));
        }
        read.push_back(got.token);
      }
      if (!r.needs_sample) continue;
      // Verification: the logits of position known_end - 1 + i decide proposal i.
      std::vector<TokenId> out;
      const int32_t known_end = end - r.num_proposed;
      for (int32_t i = 0; i <= r.num_proposed; ++i) {
        const TokenId next = fake_next(std::span<const TokenId>(read.data(), known_end + i));
        out.push_back(next);
        if (i == r.num_proposed || next != r.proposed[static_cast<size_t>(i)]) break;
      }
      sampled.push_back(std::move(out));
    }
    return sampled;
  }

  // A block's slots as stored (the lower tier's records).
  std::vector<std::pair<TokenId, int32_t>> read_block(BlockId b) {
    std::vector<std::pair<TokenId, int32_t>> out;
    for (int32_t i = 0; i < block_size_; ++i) {
      const Slot& got = slots_[static_cast<size_t>(b * block_size_ + i)];
      out.push_back({got.token, got.position});
    }
    return out;
  }
  void write_block(BlockId b, const std::vector<std::pair<TokenId, int32_t>>& in) {
    for (int32_t i = 0; i < block_size_; ++i) {
      slots_[static_cast<size_t>(b * block_size_ + i)] = {in[static_cast<size_t>(i)].first,
                                                          in[static_cast<size_t>(i)].second};
    }
  }

  const std::string& first_error() const { return first_error_; }
  int64_t num_errors() const { return num_errors_; }

 private:
  struct Slot {
    TokenId token = -1;
    int32_t position = -1;
  };
  Slot& slot(BlockId b, int32_t position) {
    return slots_[static_cast<size_t>(b * block_size_ + position % block_size_)];
  }
  template <typename... Args>
  void record(Args&&... args) {
    if (num_errors_++ == 0) first_error_ = str_cat(std::forward<Args>(args)...);
  }

  int32_t block_size_;
  std::vector<Slot> slots_;  // [num_blocks * block_size]
  int64_t num_errors_ = 0;
  std::string first_error_;
};

// A lower tier in memory over the fake model's slots: at most `capacity` records (past it one
// goes, by key order), and one load in eight fails (an unreadable record).
class FakeTier final : public LowerTier {
 public:
  FakeTier(FakeModel& model, size_t capacity, uint32_t seed)
      : model_(model), capacity_(capacity), rng_(seed) {}

  PrefixDigest chain(const PrefixDigest& parent, uint64_t extra,
                     std::span<const TokenId> tokens) const override {
    const uint64_t lo = hash_block(parent.lo, extra ^ 0x77, tokens);
    return {lo, hash_block(parent.hi, extra, tokens) ^ lo};
  }
  void store(BlockId block, BlockHash hash, const PrefixDigest& digest,
             std::span<const TokenId> tokens) override {
    if (records_.size() >= capacity_) records_.erase(records_.begin());
    records_.emplace(Key{hash, digest.lo, digest.hi},
                     Record{{tokens.begin(), tokens.end()}, model_.read_block(block)});
  }
  bool contains(BlockHash hash, const PrefixDigest& digest) const override {
    return records_.count(Key{hash, digest.lo, digest.hi}) > 0;
  }
  bool load(BlockId block, BlockHash hash, const PrefixDigest& digest,
            std::span<const TokenId> tokens) override {
    auto it = records_.find(Key{hash, digest.lo, digest.hi});
    if (it == records_.end() || rng_() % 8 == 0) return false;
    const std::vector<TokenId>& stored = it->second.tokens;
    if (!std::equal(tokens.begin(), tokens.end(), stored.begin(), stored.end())) return false;
    model_.write_block(block, it->second.slots);
    ++num_loads;
    return true;
  }

  // Loads land after 0 to 3 polls, like reads on a thread of their own. Until then their
  // blocks hold junk: whoever read them before the load landed would compute a wrong token.
  uint64_t start_load(std::vector<BlockLoad> loads) override {
    for (const BlockLoad& l : loads) {
      model_.write_block(l.block, std::vector<std::pair<TokenId, int32_t>>(
                                      model_.read_block(l.block).size(), {-7, -7}));
    }
    pending_.push_back({next_ticket_, std::move(loads), static_cast<int>(rng_() % 4)});
    ++num_started;
    return next_ticket_++;
  }
  std::optional<int32_t> finish_load(uint64_t ticket) override {
    auto it = std::find_if(pending_.begin(), pending_.end(),
                           [ticket](const Pending& p) { return p.ticket == ticket; });
    if (it == pending_.end() || it->polls_left-- > 0) return std::nullopt;
    int32_t n = 0;
    for (const BlockLoad& l : it->loads) {
      if (!load(l.block, l.hash, l.digest, l.tokens)) break;
      ++n;
    }
    pending_.erase(it);
    return n;
  }

  int64_t num_loads = 0;  // that succeeded
  int64_t num_started = 0;  // loads started

 private:
  struct Pending {
    uint64_t ticket;
    std::vector<BlockLoad> loads;
    int polls_left;
  };
  std::vector<Pending> pending_;
  uint64_t next_ticket_ = 1;
  using Key = std::tuple<BlockHash, uint64_t, uint64_t>;
  struct Record {
    std::vector<TokenId> tokens;
    std::vector<std::pair<TokenId, int32_t>> slots;
  };
  FakeModel& model_;
  size_t capacity_;
  std::mt19937 rng_;
  std::map<Key, Record> records_;
};

// The fake model's slots as bytes, for a host tier (kv/host_tier.h) over them.
PoolBlockBytes fake_pool_bytes(FakeModel& model, int32_t block_size) {
  PoolBlockBytes p;
  p.block_bytes = static_cast<uint64_t>(block_size) * 2 * sizeof(int32_t);  // token, position
  p.read = [&model](BlockId b, uint8_t* out) {
    for (const auto& [token, position] : model.read_block(b)) {
      std::memcpy(out, &token, sizeof token);
      std::memcpy(out + sizeof token, &position, sizeof position);
      out += sizeof token + sizeof position;
    }
  };
  p.write = [&model, block_size](BlockId b, const uint8_t* in) {
    std::vector<std::pair<TokenId, int32_t>> slots(static_cast<size_t>(block_size));
    for (auto& [token, position] : slots) {
      std::memcpy(&token, in, sizeof token);
      std::memcpy(&position, in + sizeof token, sizeof position);
      in += sizeof token + sizeof position;
    }
    model.write_block(b, slots);
  };
  p.any_thread = false;  // loads at once: the runs stay reproducible
  return p;
}

// Checks on a fresh plan, before the step runs.
void check_plan(const StepPlan& plan, const Scheduler& s) {
  const SchedulerConfig& config = s.config();
  EXPECT_LE(plan.num_scheduled_tokens, config.max_num_batched_tokens);
  EXPECT_LE(static_cast<int32_t>(plan.sequences.size()), config.max_num_seqs);
  int32_t total = 0;
  std::unordered_set<SequenceId> ids;
  for (const ScheduledSequence& r : plan.sequences) {
    EXPECT_TRUE(ids.insert(r.seq_id).second);
    const Sequence* req = s.find(r.seq_id);
    ASSERT_NE(req, nullptr);
    EXPECT_EQ(r.start_position, req->num_computed_tokens);
    EXPECT_GT(r.num_new_tokens, 0);
    const int32_t end = r.start_position + r.num_new_tokens;
    EXPECT_GE(r.num_proposed, 0);
    EXPECT_LE(r.num_proposed, req->num_lookahead_tokens);
    EXPECT_LE(end - r.num_proposed, req->num_tokens());
    EXPECT_EQ(r.needs_sample, end - r.num_proposed == req->num_tokens() && !req->is_prompt_only());
    // Proposals only for a decode, and never past max_tokens.
    if (r.num_proposed > 0) {
      EXPECT_EQ(r.num_new_tokens, 1 + r.num_proposed);
      EXPECT_LE(req->num_output_tokens() + r.num_proposed + 1, req->max_tokens);
    }
    EXPECT_GE(static_cast<int64_t>(r.block_table.size()) * s.kv().block_size(), end);
    total += r.num_new_tokens;
  }
  EXPECT_EQ(total, plan.num_scheduled_tokens);
  // Liveness: with live requests something always runs (one request alone always fits),
  // unless every request that could is waiting for its blocks from the lower tier.
  if (s.has_unfinished() && s.num_loading() == 0) {
    EXPECT_FALSE(plan.sequences.empty());
  }
}

BlockHash few_hashes(BlockHash parent, uint64_t extra, std::span<const TokenId> tokens) {
  return hash_block(parent, extra, tokens) & 3;  // constant collisions
}
BlockHash parentless_hash(BlockHash, uint64_t extra, std::span<const TokenId> tokens) {
  return hash_block(kRootBlockHash, extra, tokens);  // equal blocks after other prefixes collide
}

struct Totals {
  int64_t num_finished = 0, num_aborted = 0, num_forks = 0, num_copies = 0;
  int64_t num_preemptions = 0, num_hit_tokens = 0, num_chunks = 0;
  int64_t num_proposed = 0, num_accepted = 0;
  int64_t num_lower_tier_tokens = 0;
  int64_t num_host_tier_tokens = 0;  // of those, from a host tier
  int64_t num_recomputed_tokens = 0;  // dropped by preemptions and computed again
  int64_t num_loading_steps = 0;  // steps planned while some request's blocks were being read
  int64_t num_prompt_only = 0;  // prompt-only requests (embeddings) that finished
};

// Proposals for each request the plan lets propose: the fake model's own continuation, cut
// short and followed by random tokens one time in three, so some are accepted and some not.
void propose(StepPlan& plan, const Scheduler& s, std::mt19937& rng) {
  for (ScheduledSequence& r : plan.sequences) {
    if (r.num_proposed == 0) continue;
    const Sequence& req = *s.find(r.seq_id);
    std::vector<TokenId> seq(req.prompt);
    seq.insert(seq.end(), req.output.begin(), req.output.end());
    const int32_t wrong_from = rng() % 3 == 0 ? static_cast<int32_t>(rng() % r.num_proposed) : r.num_proposed;
    for (int32_t i = 0; i < r.num_proposed; ++i) {
      const TokenId t = i >= wrong_from ? static_cast<TokenId>(rng() % kVocab) : fake_next(seq);
      r.proposed.push_back(t);
      seq.push_back(t);
    }
  }
}

constexpr int kMaxPrompt = 48;
constexpr int kMaxTokens = 16;

void run_seed(uint32_t seed, int num_steps, Totals& totals) {
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  auto uniform = [&rng](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const int32_t block_sizes[] = {1, 2, 4, 8, 16};
  SchedulerConfig config;
  config.kv.block_size = block_sizes[seed % 5];
  const int32_t min_blocks =
      (kMaxPrompt + kMaxTokens - 1 + config.kv.block_size - 1) / config.kv.block_size;
  config.kv.num_blocks = min_blocks + uniform(0, min_blocks);
  config.kv.enable_prefix_caching = seed % 7 != 3;
  config.kv.hash_fn = seed % 4 == 0 ? few_hashes : seed % 4 == 1 ? parentless_hash : hash_block;
  config.max_num_batched_tokens = uniform(1, 48);
  config.max_num_seqs = uniform(1, 8);
  Scheduler s(config);
  FakeModel model(config.kv.num_blocks, config.kv.block_size);
  FakeTier tier(model, static_cast<size_t>(uniform(1, 3 * config.kv.num_blocks)), seed);
  // Below the pool: the fake tier alone (seeds 0 mod 4), a host tier over it (2 mod 4), or a
  // host tier alone (1 mod 4), the host tier holding 1 to 2 pools' worth of blocks.
  const uint64_t host_bytes = static_cast<uint64_t>(uniform(1, 2 * config.kv.num_blocks)) *
                              (fake_pool_bytes(model, config.kv.block_size).block_bytes +
                               static_cast<uint64_t>(config.kv.block_size) * sizeof(TokenId));
  HostTier host(fake_pool_bytes(model, config.kv.block_size), host_bytes,
                seed % 4 == 2 ? &tier : nullptr);
  if (seed % 4 == 0) s.set_lower_tier(&tier);
  if (seed % 4 == 1 || seed % 4 == 2) s.set_lower_tier(&host);

  std::vector<std::vector<TokenId>> bases(3);
  for (auto& base : bases) {
    for (int i = 0; i < kMaxPrompt; ++i) base.push_back(uniform(0, 999));
  }
  std::vector<SequenceId> live;
  std::unordered_map<SequenceId, Sequence> done;  // finished or aborted, by id
  SequenceId next_id = 1;
  auto pick = [&](const std::vector<SequenceId>& ids) {
    return ids[static_cast<size_t>(uniform(0, static_cast<int>(ids.size()) - 1))];
  };
  std::vector<SequenceId> forkable;  // the live requests that are not prompt-only
  auto remove_live = [&](SequenceId id) {
    std::erase(live, id);
    std::erase(forkable, id);
  };
  auto add = [&] {
    Sequence r;
    r.id = next_id++;
    const std::vector<TokenId>& base = bases[static_cast<size_t>(uniform(0, 2))];
    r.prompt.assign(base.begin(), base.begin() + uniform(0, 40));
    const int num_own = uniform(r.prompt.empty() ? 1 : 0, 8);
    for (int n = 0; n < num_own; ++n) r.prompt.push_back(uniform(0, 999));
    r.max_tokens = uniform(1, kMaxTokens);
    if (uniform(0, 1)) r.stop_ids.push_back(uniform(0, kVocab - 1));
    r.cache_key = uniform(0, 3) == 0 ? 1 : 0;
    if (uniform(0, 4) == 0) {  // an embedding: prompt-only, as the engine makes it
      if (r.prompt.empty()) r.prompt.push_back(uniform(0, 999));
      r.prompt_only = uniform(0, 1) ? PromptOnly::kAllRows : PromptOnly::kLastRow;
      r.max_tokens = 1;
      r.stop_ids.clear();
    } else {
      forkable.push_back(r.id);
    }
    live.push_back(r.id);
    s.add_sequence(std::move(r));
  };
  auto abort_one = [&](SequenceId id) {
    std::optional<Sequence> r = s.abort(id);
    ASSERT_TRUE(r.has_value());
    remove_live(id);
    ++totals.num_aborted;
    done.emplace(id, std::move(*r));
  };

  int step = 0;
  for (; step < num_steps + 5000; ++step) {
    const bool adding = step < num_steps;
    if (!adding && !s.has_unfinished()) break;
    if (adding) {
      if (uniform(0, 2) == 0 && live.size() < 24) add();
      s.check_invariants();
      if (uniform(0, 19) == 0 && !live.empty()) abort_one(pick(live));
      s.check_invariants();
      if (uniform(0, 14) == 0 && !forkable.empty()) {
        s.fork(pick(forkable), next_id);
        forkable.push_back(next_id);
        live.push_back(next_id++);
        ++totals.num_forks;
        s.check_invariants();
      }
    }
    // Half the live requests ask to speculate, up to 4 tokens.
    for (SequenceId id : live) {
      if (uniform(0, 1)) s.set_num_lookahead_tokens(id, uniform(0, 4));
    }
    StepPlan plan = s.schedule();
    s.check_invariants();
    check_plan(plan, s);
    totals.num_loading_steps += s.num_loading() > 0 ? 1 : 0;
    propose(plan, s, rng);
    totals.num_copies += static_cast<int64_t>(plan.block_copies.size());
    for (const ScheduledSequence& r : plan.sequences) totals.num_chunks += r.needs_sample ? 0 : 1;
    const std::vector<std::vector<TokenId>> sampled = model.run(plan, s);
    {
      size_t k = 0;
      for (const ScheduledSequence& r : plan.sequences) {
        if (!r.needs_sample) continue;
        totals.num_proposed += r.num_proposed;
        totals.num_accepted += static_cast<int64_t>(sampled[k++].size()) - 1;
      }
    }
    ASSERT_EQ(model.num_errors(), 0) << model.first_error();
    // Now and then a request is aborted while its step is in flight.
    if (adding && uniform(0, 24) == 0 && !plan.sequences.empty()) {
      std::vector<SequenceId> ids;
      for (const ScheduledSequence& r : plan.sequences) ids.push_back(r.seq_id);
      abort_one(pick(ids));
      s.check_invariants();
    }
    for (Sequence& r : s.commit(plan, sampled)) {
      remove_live(r.id);
      ++totals.num_finished;
      done.emplace(r.id, std::move(r));
    }
    s.check_invariants();
  }
  ASSERT_FALSE(s.has_unfinished()) << "requests left after " << step << " steps";
  EXPECT_TRUE(live.empty());
  EXPECT_EQ(static_cast<SequenceId>(done.size()), next_id - 1);  // each finished or aborted once
  // Loads of requests aborted while their blocks were read land for the prefix cache alone.
  for (int i = 0; i < 8 && s.stats().kv.num_lower_tier_loads > 0; ++i) {
    EXPECT_TRUE(s.schedule().sequences.empty());
    s.check_invariants();
  }
  const SchedulerStats stats = s.stats();
  EXPECT_EQ(stats.kv.num_lower_tier_loads, 0);
  EXPECT_EQ(stats.kv.num_used_blocks, 0);
  EXPECT_EQ(stats.kv.num_free_blocks, config.kv.num_blocks);
  totals.num_preemptions += stats.num_preemptions;
  totals.num_hit_tokens += stats.kv.num_hit_tokens;
  totals.num_lower_tier_tokens += stats.kv.num_lower_tier_hit_tokens;
  totals.num_host_tier_tokens += stats.kv.num_host_tier_hit_tokens;
  totals.num_recomputed_tokens += stats.num_recomputed_tokens;
  // A loaded block may be found in the pool later instead (its request did not fit at once).
  const auto num_host_loads = static_cast<int64_t>(host.stats().hit_blocks);
  EXPECT_LE(stats.kv.num_lower_tier_hit_tokens,
            (tier.num_loads + num_host_loads) * config.kv.block_size);
  EXPECT_LE(stats.kv.num_host_tier_hit_tokens, num_host_loads * config.kv.block_size);
  EXPECT_LE(host.stats().bytes, host_bytes);

  for (const auto& [id, r] : done) {
    if (r.is_prompt_only()) {
      EXPECT_TRUE(r.output.empty()) << "request " << id;
      if (r.status == SequenceStatus::kFinishedAborted) continue;
      EXPECT_EQ(r.status, SequenceStatus::kFinishedPrompt) << "request " << id;
      EXPECT_EQ(r.num_computed_tokens, r.num_tokens()) << "request " << id;
      ++totals.num_prompt_only;
      continue;
    }
    SequenceStatus status;
    const std::vector<TokenId> expected = alone_output(r, &status);
    if (r.status == SequenceStatus::kFinishedAborted) {
      ASSERT_LE(r.output.size(), expected.size());
      EXPECT_TRUE(std::equal(r.output.begin(), r.output.end(), expected.begin()))
          << "request " << id;
    } else {
      EXPECT_EQ(r.status, status) << "request " << id;
      EXPECT_EQ(r.output, expected) << "request " << id;
    }
  }
}

TEST(SchedulerRandomTest, RandomSequencesKeepEveryInvariant) {
  Totals totals;
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    run_seed(seed, 500, totals);
    if (HasFatalFailure()) return;
  }
  // The runs went through the interesting paths, not only the easy ones.
  EXPECT_GT(totals.num_finished, 500);
  EXPECT_GT(totals.num_aborted, 50);
  EXPECT_GT(totals.num_forks, 100);
  EXPECT_GT(totals.num_copies, 10);
  EXPECT_GT(totals.num_preemptions, 10);
  EXPECT_GT(totals.num_hit_tokens, 1000);
  EXPECT_GT(totals.num_lower_tier_tokens, 200);
  EXPECT_GT(totals.num_host_tier_tokens, 100);
  EXPECT_GT(totals.num_recomputed_tokens, 100);
  EXPECT_GT(totals.num_loading_steps, 100);
  EXPECT_GT(totals.num_chunks, 100);
  EXPECT_GT(totals.num_proposed, 1000);
  EXPECT_GT(totals.num_accepted, 300);
  EXPECT_LT(totals.num_accepted, totals.num_proposed);
  EXPECT_GT(totals.num_prompt_only, 100);
}

// Runs `requests` together through `config` until all finish; returns them by id. With
// `lower_tier_tokens`, a lower tier holding every block sits under the pool, and the prompt
// tokens read back from it are counted there.
std::unordered_map<SequenceId, Sequence> run_all(const SchedulerConfig& config,
                                                const std::vector<Sequence>& requests,
                                                int64_t* num_preemptions,
                                                int64_t* lower_tier_tokens = nullptr) {
  Scheduler s(config);
  FakeModel model(config.kv.num_blocks, config.kv.block_size);
  FakeTier tier(model, 1 << 20, 7);
  if (lower_tier_tokens != nullptr) s.set_lower_tier(&tier);
  for (const Sequence& r : requests) s.add_sequence(r);
  std::unordered_map<SequenceId, Sequence> out;
  for (int i = 0; i < 10000 && s.has_unfinished(); ++i) {
    const StepPlan plan = s.schedule();
    s.check_invariants();
    const std::vector<std::vector<TokenId>> sampled = model.run(plan, s);
    EXPECT_EQ(model.num_errors(), 0) << model.first_error();
    for (Sequence& r : s.commit(plan, sampled)) out.emplace(r.id, std::move(r));
    s.check_invariants();
  }
  EXPECT_FALSE(s.has_unfinished());
  EXPECT_EQ(s.stats().kv.num_used_blocks, 0);
  if (num_preemptions) *num_preemptions = s.stats().num_preemptions;
  if (lower_tier_tokens) *lower_tier_tokens = s.stats().kv.num_lower_tier_hit_tokens;
  return out;
}

TEST(SchedulerRandomTest, OutputsAreTheSameAloneAndInACrowd) {
  std::mt19937 rng(42);
  std::vector<TokenId> base;
  for (int i = 0; i < 40; ++i) base.push_back(static_cast<TokenId>(rng() % 1000));
  std::vector<Sequence> requests;
  for (SequenceId id = 1; id <= 12; ++id) {
    Sequence r;
    r.id = id;
    r.prompt.assign(base.begin(), base.begin() + static_cast<int>(rng() % 40));
    for (int n = 1 + static_cast<int>(rng() % 8); n > 0; --n) r.prompt.push_back(rng() % 1000);
    r.max_tokens = 8 + static_cast<int>(rng() % 9);
    requests.push_back(std::move(r));
  }
  SchedulerConfig crowded;
  crowded.kv.block_size = 4;
  crowded.kv.num_blocks = 16;  // one 47 + 16 token request alone needs 16
  crowded.max_num_batched_tokens = 12;
  crowded.max_num_seqs = 6;
  int64_t num_preemptions = 0;
  const auto together = run_all(crowded, requests, &num_preemptions);
  EXPECT_GT(num_preemptions, 0) << "the crowd should not fit";
  // Preempted requests resume from the lower tier: what they had computed comes back from it.
  int64_t num_tier_preemptions = 0, num_tier_tokens = 0;
  const auto swapped = run_all(crowded, requests, &num_tier_preemptions, &num_tier_tokens);
  EXPECT_GT(num_tier_preemptions, 0);
  EXPECT_GT(num_tier_tokens, 0);

  SchedulerConfig roomy = crowded;
  roomy.kv.num_blocks = 64;
  roomy.max_num_batched_tokens = 64;
  for (const Sequence& r : requests) {
    const auto alone = run_all(roomy, {r}, nullptr);
    ASSERT_EQ(alone.count(r.id), 1u);
    ASSERT_EQ(together.count(r.id), 1u);
    EXPECT_EQ(together.at(r.id).output, alone.at(r.id).output) << "request " << r.id;
    ASSERT_EQ(swapped.count(r.id), 1u);
    EXPECT_EQ(swapped.at(r.id).output, alone.at(r.id).output) << "request " << r.id;
    EXPECT_EQ(together.at(r.id).output.size(), static_cast<size_t>(r.max_tokens));
    SequenceStatus status;
    EXPECT_EQ(alone.at(r.id).output, alone_output(r, &status));
  }
}

}  // namespace
}  // namespace pagoda
