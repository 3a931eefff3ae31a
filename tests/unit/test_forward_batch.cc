// build_forward_batch: a StepPlan of fake requests (no model) laid out as the model's input —
// token ids from prompt and output, positions, slots through the block tables, per-sequence
// query starts, padded block tables, logit rows in plan order. And copy_kv_blocks.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "core/error.h"
#include "engine/forward_batch.h"
#include "model/kv_copy.h"
#include "sched/scheduler.h"
#include "unit/sched_test_util.h"

namespace pagoda {
namespace {

using test::make_request;

SchedulerConfig make_config(int32_t budget, int32_t num_blocks, int32_t block_size = 4) {
  SchedulerConfig config;
  config.max_num_batched_tokens = budget;
  config.max_num_seqs = 8;
  config.kv.num_blocks = num_blocks;
  config.kv.block_size = block_size;
  config.kv.enable_prefix_caching = false;
  return config;
}


// Checks the batch against the plan and the requests' token lists, written out independently.
void expect_batch_matches(const ForwardBatch& b, const StepPlan& plan, const Scheduler& s) {
  const int32_t bs = s.kv().block_size();
  ASSERT_EQ(b.num_seqs(), static_cast<int32_t>(plan.sequences.size()));
  ASSERT_EQ(b.num_tokens(), plan.num_scheduled_tokens);
  ASSERT_EQ(b.positions.size(), b.token_ids.size());
  ASSERT_EQ(b.slot_mapping.size(), b.token_ids.size());
  ASSERT_EQ(b.block_table.size(), plan.sequences.size() * b.max_blocks_per_seq);
  EXPECT_EQ(b.block_size, bs);
  std::vector<int32_t> logit_rows;
  for (size_t i = 0; i < plan.sequences.size(); ++i) {
    const ScheduledSequence& sr = plan.sequences[i];
    const Sequence* r = s.find(sr.seq_id);
    ASSERT_NE(r, nullptr);
    std::vector<TokenId> all = r->prompt;
    all.insert(all.end(), r->output.begin(), r->output.end());
    EXPECT_EQ(b.query_start[i + 1] - b.query_start[i], sr.num_new_tokens);
    for (int32_t j = 0; j < sr.num_new_tokens; ++j) {
      const int32_t row = b.query_start[i] + j, pos = sr.start_position + j;
      EXPECT_EQ(b.positions[row], pos);
      EXPECT_EQ(b.token_ids[row], all[pos]);
      EXPECT_EQ(b.slot_mapping[row], int64_t{sr.block_table[pos / bs]} * bs + pos % bs);
    }
    for (int32_t k = 0; k < b.max_blocks_per_seq; ++k) {
      const BlockId expected =
          k < static_cast<int32_t>(sr.block_table.size()) ? sr.block_table[k] : kNoBlock;
      EXPECT_EQ(b.block_table[i * b.max_blocks_per_seq + k], expected);
    }
    if (sr.needs_sample) logit_rows.push_back(b.query_start[i + 1] - 1);
  }
  EXPECT_EQ(b.logit_rows, logit_rows);
}

TEST(ForwardBatch, PrefillsAndDecodesOfTwoRequests) {
  Scheduler s(make_config(16, 8));
  s.add_sequence(make_request(1, 7, 4, 100));
  s.add_sequence(make_request(2, 3, 4, 200));
  StepPlan plan = s.schedule();
  ASSERT_EQ(plan.sequences.size(), 2u);
  ASSERT_EQ(plan.sequences[0].block_table, (std::vector<BlockId>{0, 1}));
  ASSERT_EQ(plan.sequences[1].block_table, (std::vector<BlockId>{2}));
  ForwardBatch b = build_forward_batch(plan, s);
  EXPECT_EQ(b.token_ids, (std::vector<int32_t>{100, 101, 102, 103, 104, 105, 106, 200, 201, 202}));
  EXPECT_EQ(b.positions, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 0, 1, 2}));
  EXPECT_EQ(b.slot_mapping, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 8, 9, 10}));
  EXPECT_EQ(b.query_start, (std::vector<int32_t>{0, 7, 10}));
  EXPECT_EQ(b.max_blocks_per_seq, 2);
  EXPECT_EQ(b.block_table, (std::vector<int32_t>{0, 1, 2, kNoBlock}));
  EXPECT_EQ(b.logit_rows, (std::vector<int32_t>{6, 9}));
  s.commit(plan, std::vector<TokenId>{500, 600});

  plan = s.schedule();
  b = build_forward_batch(plan, s);
  EXPECT_EQ(b.token_ids, (std::vector<int32_t>{500, 600}));
  EXPECT_EQ(b.positions, (std::vector<int32_t>{7, 3}));
  EXPECT_EQ(b.slot_mapping, (std::vector<int64_t>{7, 11}));
  EXPECT_EQ(b.query_start, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(b.logit_rows, (std::vector<int32_t>{0, 1}));
  s.commit(plan, std::vector<TokenId>{501, 601});

  // Position 8 opens A's third block.
  plan = s.schedule();
  b = build_forward_batch(plan, s);
  EXPECT_EQ(b.token_ids, (std::vector<int32_t>{501, 601}));
  EXPECT_EQ(b.positions, (std::vector<int32_t>{8, 4}));
  ASSERT_EQ(plan.sequences[0].block_table.size(), 3u);
  ASSERT_EQ(plan.sequences[1].block_table.size(), 2u);
  EXPECT_EQ(b.slot_mapping[0], int64_t{plan.sequences[0].block_table[2]} * 4);
  EXPECT_EQ(b.slot_mapping[1], int64_t{plan.sequences[1].block_table[1]} * 4);
  expect_batch_matches(b, plan, s);
}

TEST(ForwardBatch, EachTokenCarriesItsSequencesAdapter) {
  Scheduler s(make_config(32, 16));
  Sequence a = make_request(1, 3, 4, 100), b = make_request(2, 2, 4, 200),
           c = make_request(3, 4, 4, 300);
  b.adapter = 2;  // the first with one is the second sequence: the first's tokens get 0
  c.adapter = 1;
  s.add_sequence(a);
  s.add_sequence(b);
  s.add_sequence(c);
  StepPlan plan = s.schedule();
  ForwardBatch fb = build_forward_batch(plan, s);
  EXPECT_EQ(fb.adapters, (std::vector<int32_t>{0, 0, 0, 2, 2, 1, 1, 1, 1}));
  s.commit(plan, std::vector<TokenId>{7, 8, 9});
  plan = s.schedule();
  EXPECT_EQ(build_forward_batch(plan, s).adapters, (std::vector<int32_t>{0, 2, 1}));

  // No sequence with an adapter: none listed (the backend then adds nothing).
  Scheduler plain(make_config(32, 16));
  plain.add_sequence(make_request(1, 3, 4, 100));
  EXPECT_TRUE(build_forward_batch(plain.schedule(), plain).adapters.empty());
}

TEST(ForwardBatch, ChunkedPrefillWantsLogitsOnlyAtThePromptsEnd) {
  Scheduler s(make_config(5, 8));
  s.add_sequence(make_request(1, 7, 4, 100));
  s.add_sequence(make_request(2, 3, 4, 200));
  StepPlan plan = s.schedule();
  ForwardBatch b = build_forward_batch(plan, s);
  EXPECT_EQ(b.token_ids, (std::vector<int32_t>{100, 101, 102, 103, 104}));
  EXPECT_EQ(b.query_start, (std::vector<int32_t>{0, 5}));
  EXPECT_TRUE(b.logit_rows.empty());
  s.commit(plan, std::span<const TokenId>{});

  plan = s.schedule();
  b = build_forward_batch(plan, s);
  EXPECT_EQ(b.token_ids, (std::vector<int32_t>{105, 106, 200, 201, 202}));
  EXPECT_EQ(b.positions, (std::vector<int32_t>{5, 6, 0, 1, 2}));
  EXPECT_EQ(b.query_start, (std::vector<int32_t>{0, 2, 5}));
  EXPECT_EQ(b.logit_rows, (std::vector<int32_t>{1, 4}));
  expect_batch_matches(b, plan, s);
}

// Under preemption a request is recomputed from position 0, output tokens included.
TEST(ForwardBatch, RecomputedRequestsReadTheirOutputTokens) {
  Scheduler s(make_config(64, 6));
  for (SequenceId id = 1; id <= 4; ++id)
    s.add_sequence(make_request(id, 3 + int(id), 12, 100 * TokenId(id)));
  int num_recomputed_outputs = 0;
  TokenId next = 1000;
  while (s.has_unfinished()) {
    StepPlan plan = s.schedule();
    s.check_invariants();
    ForwardBatch b = build_forward_batch(plan, s);
    expect_batch_matches(b, plan, s);
    std::vector<TokenId> sampled;
    for (const ScheduledSequence& sr : plan.sequences) {
      const Sequence* r = s.find(sr.seq_id);
      if (sr.start_position == 0 && r->num_output_tokens() > 0) ++num_recomputed_outputs;
      if (sr.needs_sample) sampled.push_back(next++);
    }
    s.commit(plan, sampled);
    s.check_invariants();
  }
  EXPECT_GT(s.stats().num_preemptions, 0);
  EXPECT_GT(num_recomputed_outputs, 0);
}

TEST(ForwardBatch, RejectsUnknownRequestsAndShortTables) {
  Sequence r = make_request(7, 5, 4, 100);
  StepPlan plan;
  plan.sequences.push_back({7, 5, 0, {3}, true, 0, {}, -1});
  plan.num_scheduled_tokens = 5;
  const FindRequest none = [](SequenceId) -> const Sequence* { return nullptr; };
  const FindRequest found = [&](SequenceId id) { return id == 7 ? &r : nullptr; };
  EXPECT_THROW(build_forward_batch(plan, none, 4), Error);
  EXPECT_THROW(build_forward_batch(plan, found, 4), Error);  // 5 tokens, one block of 4
  plan.sequences[0].block_table = {3, 1};
  ForwardBatch b = build_forward_batch(plan, found, 4);
  EXPECT_EQ(b.slot_mapping, (std::vector<int64_t>{12, 13, 14, 15, 4}));
  plan.sequences[0].needs_sample = false;  // the scheduled tokens reach the end: it must sample
  EXPECT_THROW(build_forward_batch(plan, found, 4), Error);
}

TEST(KvCopy, CopiesWholeBlocksOfEveryLayer) {
  ModelConfig config;
  config.num_layers = 2;
  config.num_kv_heads = 2;
  config.head_dim = 3;
  const int32_t num_blocks = 4, bs = 2;
  KvStorage kv(config, num_blocks, bs);
  const int64_t block_floats = int64_t{bs} * 2 * 3;
  auto value = [](int layer, int kind, int64_t i) {
    return float(layer * 10000 + kind * 1000 + i);
  };
  for (int32_t l = 0; l < 2; ++l) {
    for (int64_t i = 0; i < num_blocks * block_floats; ++i) {
      kv.k(l)[i] = value(l, 0, i);
      kv.v(l)[i] = value(l, 1, i);
    }
  }
  const std::vector<BlockCopy> copies = {{1, 3}, {3, 0}};  // in order: 0 receives 1's data
  const auto backend = make_reference_backend();
  copy_kv_blocks(*backend, kv, config, copies);
  const int source_block[] = {1, 1, 2, 1};
  for (int32_t l = 0; l < 2; ++l) {
    for (int b = 0; b < num_blocks; ++b) {
      for (int64_t i = 0; i < block_floats; ++i) {
        const int64_t src = source_block[b] * block_floats + i;
        ASSERT_EQ(kv.k(l)[b * block_floats + i], value(l, 0, src))
            << "layer " << l << " block " << b;
        ASSERT_EQ(kv.v(l)[b * block_floats + i], value(l, 1, src))
            << "layer " << l << " block " << b;
      }
    }
  }
  EXPECT_THROW(copy_kv_blocks(*backend, kv, config, std::vector<BlockCopy>{{0, 4}}), Error);
  EXPECT_THROW(copy_kv_blocks(*backend, kv, config, std::vector<BlockCopy>{{-1, 2}}), Error);
  ModelConfig other = config;
  other.num_layers = 3;
  EXPECT_THROW(copy_kv_blocks(*backend, kv, other, copies), Error);
}

}  // namespace
}  // namespace pagoda
