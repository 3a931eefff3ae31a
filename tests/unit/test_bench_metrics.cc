// Benchmark metrics on hand-made timelines; expected values worked out by hand (percentiles as
// numpy.percentile's default "linear" method gives them).
#include <gtest/gtest.h>

#include "bench/metrics.h"
#include "core/error.h"

namespace pagoda {
namespace {

constexpr double kTol = 1e-12;

TEST(BenchMetrics, PercentileInterpolatesBetweenClosestRanks) {
  // Even count: the median falls between the two middle values.
  EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4}, 50), 2.5);
  // rank = 0.9 * 3 = 2.7: 3 + 0.7 * (4 - 3).
  EXPECT_NEAR(percentile({1, 2, 3, 4}, 90), 3.7, kTol);
  EXPECT_NEAR(percentile({1, 2, 3, 4}, 99), 3.97, kTol);
  // Unsorted input is sorted first; rank 0.75 lies between 1 and 2.
  EXPECT_NEAR(percentile({4, 1, 3, 2}, 25), 1.75, kTol);
  EXPECT_NEAR(percentile({20, 10}, 90), 19.0, kTol);
  EXPECT_NEAR(percentile({10, 20}, 99), 19.9, kTol);
  EXPECT_NEAR(percentile({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 90), 9.1, kTol);
  EXPECT_NEAR(percentile({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 99), 9.91, kTol);
  // Odd count: the median is the middle value itself.
  EXPECT_DOUBLE_EQ(percentile({7, 1, 3}, 50), 3);
  EXPECT_DOUBLE_EQ(percentile({7, 1, 3}, 0), 1);
  EXPECT_DOUBLE_EQ(percentile({7, 1, 3}, 100), 7);
}

TEST(BenchMetrics, PercentileOfOneValueIsThatValue) {
  for (double p : {0.0, 37.0, 50.0, 99.0, 100.0}) EXPECT_DOUBLE_EQ(percentile({5}, p), 5) << p;
}

TEST(BenchMetrics, PercentileRejectsEmptyAndOutOfRange) {
  EXPECT_THROW(percentile({}, 50), Error);
  EXPECT_THROW(percentile({1, 2}, 100.5), Error);
  EXPECT_THROW(percentile({1, 2}, -1), Error);
}

TEST(BenchMetrics, SummaryOfFourValues) {
  Summary s = summarize({4, 2, 1, 3});
  EXPECT_EQ(s.num_samples, 4u);
  EXPECT_DOUBLE_EQ(s.mean, 2.5);
  EXPECT_NEAR(s.std_dev, 1.118033988749895, kTol);  // sqrt(1.25), population
  EXPECT_DOUBLE_EQ(s.median, 2.5);
  EXPECT_NEAR(s.p90, 3.7, kTol);
  EXPECT_NEAR(s.p99, 3.97, kTol);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 4);
}

TEST(BenchMetrics, SummaryOfNothingIsZeroWithZeroSamples) {
  Summary s = summarize({});
  EXPECT_EQ(s.num_samples, 0u);
  EXPECT_EQ(s.mean, 0);
  EXPECT_EQ(s.p99, 0);
  EXPECT_EQ(s.max, 0);
}

// Sent at 0; chunks at 0.5, 0.75, 1.0, 1.5; done at 1.75; 6 tokens (two chunks carried two).
RequestTimeline six_tokens() {
  RequestTimeline t;
  t.success = true;
  t.start_s = 0;
  t.arrival_s = {0.5, 0.75, 1.0, 1.5};
  t.end_s = 1.75;
  t.num_prompt_tokens = 10;
  t.num_output_tokens = 6;
  return t;
}

TEST(BenchMetrics, RequestTimelineGivesTtftTpotItlE2el) {
  RequestMetrics m = request_metrics(six_tokens());
  ASSERT_TRUE(m.ttft_s.has_value());
  EXPECT_DOUBLE_EQ(*m.ttft_s, 0.5);
  EXPECT_DOUBLE_EQ(m.e2el_s, 1.75);
  // TPOT divides by tokens, not chunks: (1.75 - 0.5) / (6 - 1).
  ASSERT_TRUE(m.tpot_s.has_value());
  EXPECT_DOUBLE_EQ(*m.tpot_s, 0.25);
  EXPECT_EQ(m.itl_s, (std::vector<double>{0.25, 0.25, 0.5}));
}

TEST(BenchMetrics, OneOutputTokenHasNoTpot) {
  RequestTimeline t;
  t.success = true;
  t.start_s = 2;
  t.arrival_s = {2.25};
  t.end_s = 2.5;
  t.num_output_tokens = 1;
  RequestMetrics m = request_metrics(t);
  EXPECT_DOUBLE_EQ(*m.ttft_s, 0.25);
  EXPECT_FALSE(m.tpot_s.has_value());
  EXPECT_TRUE(m.itl_s.empty());
  EXPECT_DOUBLE_EQ(m.e2el_s, 0.5);
}

TEST(BenchMetrics, NothingStreamedHasNoTtft) {
  RequestTimeline t;
  t.success = true;
  t.start_s = 1;
  t.end_s = 3;
  t.num_output_tokens = 4;
  RequestMetrics m = request_metrics(t);
  EXPECT_FALSE(m.ttft_s.has_value());
  EXPECT_FALSE(m.tpot_s.has_value());
  EXPECT_DOUBLE_EQ(m.e2el_s, 2);
}

TEST(BenchMetrics, OutOfOrderTimelineIsAnError) {
  RequestTimeline t = six_tokens();
  t.arrival_s = {0.5, 0.4};
  EXPECT_THROW(request_metrics(t), Error);
  t = six_tokens();
  t.arrival_s.push_back(2.0);  // after the end
  EXPECT_THROW(request_metrics(t), Error);
  t = six_tokens();
  t.arrival_s = {-0.25};  // before the start
  EXPECT_THROW(request_metrics(t), Error);
  t = six_tokens();
  t.end_s = -1;
  EXPECT_THROW(request_metrics(t), Error);
}

// A: six_tokens (TTFT 0.5, TPOT 0.25, E2EL 1.75); B: one token (TTFT 0.25, no TPOT,
// E2EL 0.25); C: failed; D: TTFT 2, TPOT (3 - 2) / 2 = 0.5, E2EL 3. Run: 4 s.
std::vector<RequestTimeline> four_requests() {
  RequestTimeline b;
  b.success = true;
  b.start_s = 0.25;
  b.arrival_s = {0.5};
  b.end_s = 0.5;
  b.num_prompt_tokens = 7;
  b.num_output_tokens = 1;
  RequestTimeline c;
  c.success = false;
  c.error = "HTTP 500";
  c.start_s = 0.5;
  c.end_s = 0.75;
  c.num_prompt_tokens = 9;
  c.num_output_tokens = 3;  // whatever a failed request reports is not counted
  RequestTimeline d;
  d.success = true;
  d.start_s = 1;
  d.arrival_s = {3.0, 3.5};
  d.end_s = 4;
  d.num_prompt_tokens = 20;
  d.num_output_tokens = 3;
  return {six_tokens(), b, c, d};
}

TEST(BenchMetrics, AggregateCountsFailuresAndThroughputs) {
  BenchMetrics m = aggregate_metrics(four_requests(), 4.0);
  EXPECT_EQ(m.num_requests, 4u);
  EXPECT_EQ(m.num_completed, 3u);
  EXPECT_EQ(m.num_failed, 1u);
  EXPECT_EQ(m.errors, std::vector<std::string>{"HTTP 500"});
  EXPECT_EQ(m.total_prompt_tokens, 37u);  // 10 + 7 + 20
  EXPECT_EQ(m.total_output_tokens, 10u);  // 6 + 1 + 3
  EXPECT_DOUBLE_EQ(m.request_throughput, 0.75);
  EXPECT_DOUBLE_EQ(m.output_throughput, 2.5);
  EXPECT_DOUBLE_EQ(m.total_token_throughput, 11.75);
  EXPECT_FALSE(m.request_goodput.has_value());

  EXPECT_EQ(m.ttft_s.num_samples, 3u);
  EXPECT_NEAR(m.ttft_s.mean, 2.75 / 3, kTol);
  EXPECT_DOUBLE_EQ(m.ttft_s.median, 0.5);
  EXPECT_DOUBLE_EQ(m.ttft_s.min, 0.25);
  EXPECT_DOUBLE_EQ(m.ttft_s.max, 2);
  // B's single token has no TPOT: two samples, not three, and no zero among them.
  EXPECT_EQ(m.tpot_s.num_samples, 2u);
  EXPECT_DOUBLE_EQ(m.tpot_s.mean, 0.375);
  EXPECT_DOUBLE_EQ(m.tpot_s.min, 0.25);
  // ITL pools every gap: A's 0.25, 0.25, 0.5 and D's 0.5.
  EXPECT_EQ(m.itl_s.num_samples, 4u);
  EXPECT_DOUBLE_EQ(m.itl_s.mean, 0.375);
  EXPECT_DOUBLE_EQ(m.itl_s.median, 0.375);
  EXPECT_EQ(m.e2el_s.num_samples, 3u);
  EXPECT_DOUBLE_EQ(m.e2el_s.median, 1.75);
  EXPECT_DOUBLE_EQ(m.e2el_s.max, 3);
}

TEST(BenchMetrics, GoodputNeedsEveryGivenLimit) {
  SloLimits both;
  both.ttft_s = 0.5;  // inclusive: A's 0.5 meets it
  both.tpot_s = 0.4;
  BenchMetrics m = aggregate_metrics(four_requests(), 4.0, both);
  // A meets both, B meets both (one token: no TPOT to miss), D misses TTFT, C failed.
  EXPECT_EQ(m.num_good, 2u);
  ASSERT_TRUE(m.request_goodput.has_value());
  EXPECT_DOUBLE_EQ(*m.request_goodput, 0.5);

  SloLimits tpot;
  tpot.tpot_s = 0.2;  // A's 0.25 and D's 0.5 miss; B has no TPOT and counts
  EXPECT_EQ(aggregate_metrics(four_requests(), 4.0, tpot).num_good, 1u);
  SloLimits ttft;
  ttft.ttft_s = 3;  // every completed request; never the failed one
  EXPECT_DOUBLE_EQ(*aggregate_metrics(four_requests(), 4.0, ttft).request_goodput, 0.75);
  SloLimits e2el;
  e2el.e2el_s = 1.75;
  EXPECT_EQ(aggregate_metrics(four_requests(), 4.0, e2el).num_good, 2u);
}

TEST(BenchMetrics, UnstreamedRequestNeverMeetsATtftLimit) {
  RequestTimeline t;
  t.success = true;
  t.start_s = 0;
  t.end_s = 0.1;
  t.num_output_tokens = 4;
  SloLimits ttft;
  ttft.ttft_s = 10;
  EXPECT_FALSE(meets_slo(request_metrics(t), t.num_output_tokens, ttft));
  SloLimits e2el;
  e2el.e2el_s = 10;
  EXPECT_TRUE(meets_slo(request_metrics(t), t.num_output_tokens, e2el));
}

TEST(BenchMetrics, AllFailedStillCounted) {
  std::vector<RequestTimeline> requests(3);
  for (auto& r : requests) r.error = "connection refused";
  BenchMetrics m = aggregate_metrics(requests, 2.0);
  EXPECT_EQ(m.num_requests, 3u);
  EXPECT_EQ(m.num_failed, 3u);
  EXPECT_EQ(m.num_completed, 0u);
  EXPECT_EQ(m.errors.size(), 3u);
  EXPECT_EQ(m.request_throughput, 0);
  EXPECT_EQ(m.ttft_s.num_samples, 0u);
}

TEST(BenchMetrics, DurationMustBePositive) {
  EXPECT_THROW(aggregate_metrics(four_requests(), 0), Error);
}

}  // namespace
}  // namespace pagoda
