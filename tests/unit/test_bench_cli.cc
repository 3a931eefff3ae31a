// The report pieces every in-process benchmark shares: the summary table's columns and "-" for
// what was not measured, summaries as JSON (null without samples), the engine configuration
// from the options.
#include <gtest/gtest.h>

#include "bench/bench_cli.h"
#include "core/error.h"

namespace pagoda::bench {
namespace {

TEST(BenchCli, SummaryTableShowsDashesForWhatWasNotMeasured) {
  BenchModel m;
  m.name = "tiny.gguf";
  m.precision = "Q4_0";
  const Table t = summary_table(
      m, {{"batched", 12.345, kNoValue, 100.0, 2.5, 3u << 20, 2048u},
          {"memory", kNoValue, kNoValue, kNoValue, kNoValue, std::nullopt, 20ull << 30}});
  ASSERT_EQ(t.columns.size(), 10u);
  EXPECT_EQ(t.columns[4], "TTFT ms");
  EXPECT_EQ(t.rows[0], (std::vector<std::string>{"pagoda", "tiny.gguf", "Q4_0", "batched", "12.3",
                                                 "-", "100.0", "2.500", "3.0 MiB", "2.0 KiB"}));
  EXPECT_EQ(t.rows[1][4], "-");
  EXPECT_EQ(t.rows[1][8], "-");
  EXPECT_EQ(t.rows[1][9], "20.0 GiB");
}

TEST(BenchCli, SummaryJsonScalesAndIsNullWithoutSamples) {
  const Json j = summary_json(summarize({0.001, 0.003}), 1e3);
  EXPECT_EQ(j["n"], 2);
  EXPECT_DOUBLE_EQ(j["mean"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(j["max"].get<double>(), 3.0);
  const Json none = summary_json(summarize({}), 1e3);
  EXPECT_EQ(none["n"], 0);
  EXPECT_TRUE(none["mean"].is_null());
  EXPECT_TRUE(none["p99"].is_null());
  EXPECT_TRUE(number_or_null(kNoValue).is_null());
  EXPECT_TRUE(number_or_null(1.0 / 0.0).is_null());
}

TEST(BenchCli, EngineConfigTakesOneBudget) {
  EngineOptions o;
  EXPECT_EQ(engine_config(o, 4096).num_kv_cache_tokens, 4096);
  o.kv_tokens = 100;
  o.max_num_seqs = 3;
  o.no_prefix_caching = true;
  const EngineConfig c = engine_config(o, 4096);
  EXPECT_EQ(c.num_kv_cache_tokens, 100);
  EXPECT_EQ(c.kv_cache_bytes, 0u);
  EXPECT_EQ(c.max_num_seqs, 3);
  EXPECT_FALSE(c.enable_prefix_caching);
  o.kv_cache_gb = 0.5;
  EXPECT_THROW(engine_config(o, 4096), Error);
  o.kv_tokens = 0;
  EXPECT_EQ(engine_config(o, 4096).kv_cache_bytes, 512ull << 20);
  EXPECT_EQ(engine_config(o, 4096).num_kv_cache_tokens, 0);
  o.kv_cache_gb = -1;
  EXPECT_THROW(engine_config(o, 4096), Error);
}

}  // namespace
}  // namespace pagoda::bench
