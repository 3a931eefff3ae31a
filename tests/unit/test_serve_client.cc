// pagoda bench serve's client and load generator: SSE parsing, chunk interpretation, request
// bodies, URLs, request-set determinism, the statistics of seeded Poisson arrivals, and whole
// requests against an in-process httplib::Server that streams canned events with delays (also
// an endpoint answering 500, one that stalls, and a port that refuses connections).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <thread>

#include "bench/serve_client.h"
#include "bench/serve_load.h"
#include "bench/serve_report.h"
#include "core/error.h"

namespace pagoda::bench {
namespace {

std::vector<std::string> feed_in_pieces(const std::string& stream, size_t piece) {
  SseParser parser;
  std::vector<std::string> events;
  for (size_t at = 0; at < stream.size(); at += piece) {
    for (auto& e : parser.feed(std::string_view(stream).substr(at, piece))) events.push_back(e);
  }
  if (auto rest = parser.finish()) events.push_back(*rest);
  return events;
}

TEST(SseParser, SplitsEventsWhereverTheBytesBreak) {
  const std::string stream =
      ": keep-alive comment\n\n"
      "data: {\"a\":1}\n\n"
      "event: message\r\ndata:{\"b\":2}\r\n\r\n"
      "id: 7\ndata: line one\ndata: line two\n\n"
      "data: [DONE]\n\n";
  const std::vector<std::string> expected = {"{\"a\":1}", "{\"b\":2}", "line one\nline two",
                                             "[DONE]"};
  for (size_t piece : {1, 2, 3, 5, 7, 64, 1000}) {
    EXPECT_EQ(feed_in_pieces(stream, piece), expected) << "pieces of " << piece;
  }
}

TEST(SseParser, FinishReturnsAnUnterminatedEvent) {
  SseParser parser;
  EXPECT_TRUE(parser.feed("data: x\n\ndata: tail").size() == 1);
  EXPECT_EQ(parser.finish(), std::optional<std::string>("tail"));
  SseParser empty;
  EXPECT_TRUE(empty.feed(": only a comment\n").empty());
  EXPECT_EQ(empty.finish(), std::nullopt);
}

TEST(StreamState, CompletionAndChatChunksCountOnlyWhenTheyCarryText) {
  StreamState s;
  apply_event(R"({"choices":[{"index":0,"text":" Hello"}]})", 1.0, s);
  apply_event(R"({"choices":[{"index":0,"text":""}]})", 1.5, s);  // empty: no arrival
  apply_event(R"({"choices":[{"delta":{"role":"assistant","content":""}}]})", 1.7, s);
  apply_event(R"({"choices":[{"delta":{"content":" world"}}]})", 2.0, s);
  apply_event(R"({"choices":[{"delta":{"reasoning_content":"hmm"}}]})", 2.5, s);
  apply_event(R"({"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":9}})", 3.0, s);
  apply_event("[DONE]", 3.1, s);
  EXPECT_EQ(s.arrival_s, (std::vector<double>{1.0, 2.0, 2.5}));
  EXPECT_EQ(s.text, " Hello worldhmm");
  EXPECT_EQ(s.usage_prompt_tokens, 5u);
  EXPECT_EQ(s.usage_output_tokens, 9u);
  EXPECT_TRUE(s.done);
  EXPECT_TRUE(s.error.empty());
}

TEST(StreamState, ErrorsAndGarbageAreReported) {
  StreamState s;
  apply_event(R"({"error":{"message":"out of memory","type":"server_error"}})", 1, s);
  EXPECT_EQ(s.error, "out of memory");
  StreamState g;
  apply_event("not json", 1, g);
  EXPECT_NE(g.error.find("unparsable"), std::string::npos);
  StreamState null_usage;
  apply_event(R"({"choices":[{"text":"x"}],"usage":null})", 1, null_usage);
  EXPECT_FALSE(null_usage.usage_output_tokens.has_value());
  EXPECT_EQ(null_usage.arrival_s.size(), 1u);
}

TEST(RequestBody, AsksForAStreamWithUsageAndExactLength) {
  ClientConfig config;
  config.model = "m";
  const RequestSpec spec{"a b c", 3, 17};
  const auto body = nlohmann::json::parse(request_body(config, spec));
  EXPECT_EQ(body["model"], "m");
  EXPECT_EQ(body["prompt"], "a b c");
  EXPECT_EQ(body["stream"], true);
  EXPECT_EQ(body["stream_options"]["include_usage"], true);
  EXPECT_EQ(body["max_tokens"], 17);
  EXPECT_EQ(body["min_tokens"], 17);
  EXPECT_EQ(body["ignore_eos"], true);
  EXPECT_EQ(body["temperature"], 0);
  config.api = ApiKind::kChat;
  const auto chat = nlohmann::json::parse(request_body(config, spec));
  EXPECT_FALSE(chat.contains("prompt"));
  EXPECT_EQ(chat["messages"][0]["role"], "user");
  EXPECT_EQ(chat["messages"][0]["content"], "a b c");
  EXPECT_EQ(chat["max_completion_tokens"], 17);
}

TEST(Utf8Prefix, NeverSplitsACharacter) {
  const std::string text = "ab\xC3\xA9\xE2\x82\xAC";  // "abé€"
  EXPECT_EQ(utf8_prefix(text, 100), text);
  EXPECT_EQ(utf8_prefix(text, 3), "ab");
  EXPECT_EQ(utf8_prefix(text, 4), "ab\xC3\xA9");
  EXPECT_EQ(utf8_prefix(text, 6), "ab\xC3\xA9");
  EXPECT_EQ(utf8_prefix(text, 0), "");
}

TEST(ServerUrl, SplitsOriginAndPrefix) {
  auto u = parse_server_url("http://127.0.0.1:8080");
  EXPECT_EQ(u.origin, "http://127.0.0.1:8080");
  EXPECT_EQ(u.prefix, "");
  EXPECT_EQ(parse_server_url("http://h:1/v1/").prefix, "");
  EXPECT_EQ(parse_server_url("https://h/api/v1").prefix, "/api");
  EXPECT_EQ(parse_server_url("https://h/api/v1").origin, "https://h");
  EXPECT_THROW(parse_server_url("localhost:8000"), Error);
  EXPECT_THROW(parse_server_url("ftp://h"), Error);
  EXPECT_THROW(parse_server_url("http://"), Error);
  EXPECT_THROW(parse_server_url("http://h/x?y=1"), Error);
  EXPECT_EQ(url_label("http://127.0.0.1:8080/v1"), "127.0.0.1:8080");
}

size_t word_count(const std::string& text) {
  size_t n = text.empty() ? 0 : 1;
  for (char c : text) n += c == ' ';
  return n;
}

TEST(RequestSet, SameSeedSameRequestsWithinTheRanges) {
  const LengthRange prompt{10, 40}, output{3, 9};
  const auto a = random_text_requests(50, prompt, output, 7);
  const auto b = random_text_requests(50, prompt, output, 7);
  const auto c = random_text_requests(50, prompt, output, 8);
  ASSERT_EQ(a.size(), 50u);
  bool differs = false;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].prompt, b[i].prompt);
    EXPECT_EQ(a[i].output_tokens, b[i].output_tokens);
    EXPECT_GE(a[i].prompt_tokens, 10u);
    EXPECT_LE(a[i].prompt_tokens, 40u);
    EXPECT_EQ(word_count(a[i].prompt), a[i].prompt_tokens);
    EXPECT_GE(a[i].output_tokens, 3u);
    EXPECT_LE(a[i].output_tokens, 9u);
    differs = differs || a[i].prompt != c[i].prompt;
  }
  EXPECT_TRUE(differs);
  EXPECT_NE(a[0].prompt, a[1].prompt);
}

TEST(RequestSet, ParsesGoodputLimitsInMilliseconds) {
  const SloLimits l = parse_goodput({"ttft:250", "e2el:1500.5"});
  EXPECT_DOUBLE_EQ(*l.ttft_s, 0.25);
  EXPECT_DOUBLE_EQ(*l.e2el_s, 1.5005);
  EXPECT_FALSE(l.tpot_s.has_value());
  EXPECT_FALSE(parse_goodput({}).any());
  EXPECT_THROW(parse_goodput({"ttft"}), Error);
  EXPECT_THROW(parse_goodput({"itl:5"}), Error);
  EXPECT_THROW(parse_goodput({"tpot:0"}), Error);
  EXPECT_THROW(parse_goodput({"tpot:5ms"}), Error);
  EXPECT_THROW(parse_goodput({"tpot:5", "tpot:6"}), Error);
}

TEST(Arrivals, InfiniteRateSendsEverythingAtOnce) {
  EXPECT_EQ(arrival_times(4, INFINITY, 1), std::vector<double>(4, 0.0));
  EXPECT_THROW(arrival_times(4, 0, 1), Error);
}

TEST(Arrivals, PoissonGapsHaveTheExponentialsMeanSpreadAndShape) {
  const double rate = 5;
  const size_t n = 20001;
  const auto times = arrival_times(n, rate, 42);
  EXPECT_EQ(times, arrival_times(n, rate, 42));
  EXPECT_NE(times, arrival_times(n, rate, 43));
  EXPECT_EQ(times[0], 0);
  std::vector<double> gaps;
  for (size_t i = 1; i < n; ++i) {
    ASSERT_GE(times[i], times[i - 1]);
    gaps.push_back(times[i] - times[i - 1]);
  }
  double sum = 0, squares = 0;
  size_t below_mean = 0;
  for (double g : gaps) sum += g;
  const double mean = sum / gaps.size();
  for (double g : gaps) {
    squares += (g - mean) * (g - mean);
    below_mean += g < 1 / rate;
  }
  const double sd = std::sqrt(squares / gaps.size());
  // 20000 gaps: the sample mean's standard error is 0.7 % of 1 / rate.
  EXPECT_NEAR(mean, 1 / rate, 0.03 / rate);
  EXPECT_NEAR(sd / mean, 1.0, 0.05);  // exponential: standard deviation = mean
  // P(gap < mean) = 1 - 1/e for an exponential.
  EXPECT_NEAR(static_cast<double>(below_mean) / gaps.size(), 1 - std::exp(-1.0), 0.015);
}

// A port nothing listens on: bound, then closed.
int closed_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

std::string event(const nlohmann::json& chunk) { return "data: " + chunk.dump() + "\n\n"; }

// An OpenAI-compatible fake. Under "/v1": max_tokens chunks 5 ms apart, then usage and [DONE].
// Prefixes change behaviour: "/fail" answers 500, "/stall" waits 1 s before anything, "/json"
// does not stream, "/broken" sends an error event mid-stream.
class FakeServer {
 public:
  FakeServer() {
    server_.set_tcp_nodelay(true);
    server_.Get("/v1/models", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"object":"list","data":[{"id":"fake"}]})", "application/json");
    });
    server_.Post("/v1/completions", [](const httplib::Request& req, httplib::Response& res) {
      stream(req, res, false);
    });
    server_.Post("/broken/v1/completions", [](const httplib::Request& req, httplib::Response& res) {
      stream(req, res, true);
    });
    server_.Post("/fail/v1/completions", [](const httplib::Request&, httplib::Response& res) {
      res.status = 500;
      res.set_content(R"({"error":{"message":"canned failure"}})", "application/json");
    });
    server_.Post("/stall/v1/completions", [](const httplib::Request&, httplib::Response& res) {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      res.set_content("data: [DONE]\n\n", "text/event-stream");
    });
    server_.Post("/json/v1/completions", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"choices":[{"text":"all at once"}]})", "application/json");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~FakeServer() {
    server_.stop();
    thread_.join();
  }
  std::string url(const std::string& prefix = "") const {
    return "http://127.0.0.1:" + std::to_string(port_) + prefix;
  }

 private:
  static void stream(const httplib::Request& req, httplib::Response& res, bool broken) {
    const auto body = nlohmann::json::parse(req.body);
    const int n = body["max_tokens"].get<int>();
    res.set_chunked_content_provider(
        "text/event-stream", [n, broken](size_t, httplib::DataSink& sink) {
          for (int i = 0; i < n; ++i) {
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
            const std::string e = event({{"choices", {{{"index", 0}, {"text", " w"}}}}});
            sink.write(e.data(), e.size());
            if (broken && i == 1) {
              const std::string err = event({{"error", {{"message", "engine died"}}}});
              sink.write(err.data(), err.size());
            }
          }
          const std::string tail =
              event({{"choices", nlohmann::json::array()},
                     {"usage", {{"prompt_tokens", 11}, {"completion_tokens", n}}}}) +
              "data: [DONE]\n\n";
          sink.write(tail.data(), tail.size());
          sink.done();
          return true;
        });
  }

  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

ClientConfig config_for(const std::string& url, double timeout_s = 10) {
  ClientConfig config;
  config.url = parse_server_url(url);
  config.model = "fake";
  config.timeout_s = timeout_s;
  return config;
}

const RequestSpec kSpec{"one two three", 3, 6};

TEST(SendRequest, TimesEveryStreamedChunk) {
  FakeServer server;
  std::atomic<bool> stop{false};
  const Clock::time_point origin = Clock::now();
  const StreamedResult r = send_request(config_for(server.url()), kSpec, origin, stop);
  ASSERT_TRUE(r.timeline.success) << r.timeline.error;
  EXPECT_TRUE(r.usage_reported);
  EXPECT_EQ(r.timeline.num_output_tokens, 6u);
  EXPECT_EQ(r.timeline.num_prompt_tokens, 11u);
  // Chunks 5 ms apart; two may share one read, never more than were sent.
  ASSERT_GE(r.timeline.arrival_s.size(), 1u);
  EXPECT_LE(r.timeline.arrival_s.size(), 6u);
  const RequestMetrics m = request_metrics(r.timeline);
  EXPECT_GE(*m.ttft_s, 0.004);
  EXPECT_GE(m.e2el_s, 0.029);
  EXPECT_GE(*m.tpot_s, 0.004);
}

TEST(SendRequest, FailuresCarryTheirReason) {
  FakeServer server;
  std::atomic<bool> stop{false};
  const Clock::time_point origin = Clock::now();
  auto fail500 = send_request(config_for(server.url("/fail")), kSpec, origin, stop);
  EXPECT_FALSE(fail500.timeline.success);
  EXPECT_EQ(fail500.timeline.error, "HTTP 500: canned failure");
  auto refused = send_request(config_for("http://127.0.0.1:" + std::to_string(closed_port())),
                              kSpec, origin, stop);
  EXPECT_FALSE(refused.timeline.success);
  EXPECT_NE(refused.timeline.error.find("POST http://127.0.0.1:"), std::string::npos);
  EXPECT_GE(refused.timeline.end_s, refused.timeline.start_s);
  auto json = send_request(config_for(server.url("/json")), kSpec, origin, stop);
  EXPECT_EQ(json.timeline.error, "response was not streamed (Content-Type: application/json)");
  auto broken = send_request(config_for(server.url("/broken")), kSpec, origin, stop);
  EXPECT_EQ(broken.timeline.error, "server error in stream: engine died");
  const auto before = Clock::now();
  auto stalled = send_request(config_for(server.url("/stall"), 0.2), kSpec, origin, stop);
  EXPECT_EQ(stalled.timeline.error, "timed out after 0.2 s");
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - before).count(), 0.9);
}

TEST(SendRequest, ModelListGivesTheFirstId) {
  FakeServer server;
  EXPECT_EQ(fetch_first_model(config_for(server.url())), "fake");
  EXPECT_THROW(fetch_first_model(config_for(server.url("/fail"))), Error);  // 404
  EXPECT_THROW(fetch_first_model(config_for("http://127.0.0.1:" + std::to_string(closed_port()))),
               Error);
}

TEST(RunLoad, EveryRequestIsMeasuredInRequestOrder) {
  FakeServer server;
  std::atomic<bool> stop{false};
  const auto specs = random_text_requests(8, {4, 8}, {2, 5}, 1);
  LoadPlan plan;
  plan.max_concurrency = 3;
  uint64_t calls = 0;
  LoadProgress last;
  const LoadResult r =
      run_load(config_for(server.url()), specs, plan, stop, [&](const LoadProgress& p) {
        ++calls;
        last = p;
      });
  ASSERT_EQ(r.requests.size(), 8u);
  EXPECT_FALSE(r.interrupted);
  EXPECT_GT(calls, 0u);
  EXPECT_EQ(last.finished, 8u);
  EXPECT_EQ(last.failed, 0u);
  double last_end = 0;
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_TRUE(r.requests[i].timeline.success) << r.requests[i].timeline.error;
    EXPECT_EQ(r.requests[i].timeline.num_output_tokens, specs[i].output_tokens);
    last_end = std::max(last_end, r.requests[i].timeline.end_s);
  }
  EXPECT_DOUBLE_EQ(r.duration_s, last_end);
}

TEST(RunLoad, PoissonArrivalsSpreadTheSends) {
  FakeServer server;
  std::atomic<bool> stop{false};
  const auto specs = random_text_requests(6, {4, 4}, {1, 1}, 1);
  LoadPlan plan;
  plan.request_rate = 20;
  plan.seed = 5;
  const LoadResult r = run_load(config_for(server.url()), specs, plan, stop);
  const auto times = arrival_times(6, 20, 5);
  ASSERT_EQ(r.requests.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_GE(r.requests[i].timeline.start_s, times[i]);  // never sent early
    EXPECT_LT(r.requests[i].timeline.start_s, times[i] + 0.25);
  }
}

TEST(RunLoad, StopSendsNothingMore) {
  FakeServer server;
  std::atomic<bool> stop{true};
  const auto specs = random_text_requests(5, {4, 4}, {2, 2}, 1);
  const LoadResult r = run_load(config_for(server.url()), specs, LoadPlan{}, stop);
  EXPECT_TRUE(r.interrupted);
  EXPECT_TRUE(r.requests.empty());
}

TEST(RunEndpoint, FailuresAreCountedNeverDropped) {
  FakeServer server;
  std::atomic<bool> stop{false};
  const auto specs = random_text_requests(6, {4, 4}, {2, 2}, 1);
  ClientConfig no_model = config_for(server.url());
  no_model.model.clear();
  const EndpointRun ok = run_endpoint({server.url(), ""}, no_model, specs, LoadPlan{}, {}, stop);
  EXPECT_EQ(ok.model, "fake");
  EXPECT_EQ(ok.metrics.num_completed, 6u);
  EXPECT_EQ(ok.num_usage_counted, 6u);
  const std::string dead = "http://127.0.0.1:" + std::to_string(closed_port());
  const EndpointRun gone = run_endpoint({dead, "dead"}, no_model, specs, LoadPlan{}, {}, stop);
  EXPECT_EQ(gone.label, "dead");
  EXPECT_EQ(gone.metrics.num_failed, 6u);
  EXPECT_EQ(gone.metrics.num_requests, 6u);
  EXPECT_NE(gone.setup_error.find("/v1/models"), std::string::npos);
  const EndpointRun failing = run_endpoint({server.url("/fail"), ""}, config_for(server.url()),
                                           specs, LoadPlan{}, {}, stop);
  EXPECT_EQ(failing.metrics.num_failed, 6u);
  EXPECT_EQ(failing.metrics.errors, std::vector<std::string>(6, "HTTP 500: canned failure"));
}

TEST(ServeReport, StacksChartsIntoOneDocument) {
  const std::string a =
      "<?xml version=\"1.0\"?>\n<svg width=\"800.00\" height=\"450.00\"><g/></svg>";
  const std::string b = "<svg width=\"600\" height=\"300\"><rect/></svg>";
  const std::string doc = stack_svgs({a, b});
  EXPECT_EQ(doc.find("<?xml"), 0u);
  EXPECT_EQ(doc.find("<?xml", 1), std::string::npos);  // the inner prologs are gone
  EXPECT_NE(doc.find("width=\"800\" height=\"750\""), std::string::npos);
  EXPECT_NE(doc.find("<svg x=\"0\" y=\"0\" width=\"800.00\""), std::string::npos);
  EXPECT_NE(doc.find("<svg x=\"0\" y=\"450\" width=\"600\""), std::string::npos);
}

}  // namespace
}  // namespace pagoda::bench
