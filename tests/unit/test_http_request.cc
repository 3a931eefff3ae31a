// The request reader's framing rules and the Host / Origin helpers, without a socket.
#include <gtest/gtest.h>

#include <string>

#include "server/http_request.h"
#include "server/origin_policy.h"

namespace pagoda::server {
namespace {

// Feeds `raw` in one piece, as a connection would with all of it buffered.
struct Read {
  explicit Read(const std::string& raw) : reader(HttpLimits{}) { used = reader.feed(raw); }
  RequestReader reader;
  size_t used = 0;
};

TEST(RequestReader, ConnectionCloseOutlivesTake) {
  Read r("GET /health HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
  ASSERT_TRUE(r.reader.complete());
  EXPECT_FALSE(r.reader.keep_alive());
  (void)r.reader.take();
  EXPECT_FALSE(r.reader.keep_alive());  // take() releases the message; the answer is kept

  Read k("GET /health HTTP/1.1\r\nHost: a\r\n\r\n");
  (void)k.reader.take();
  EXPECT_TRUE(k.reader.keep_alive());
}

TEST(RequestReader, TransferEncodingMustBeChunkedAlone) {
  for (const char* coding : {"xchunked", "chunked, identity", "gzip, chunked", "identity"}) {
    Read r(std::string("POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: ") + coding +
           "\r\n\r\n0\r\n\r\nGET /next HTTP/1.1\r\nHost: a\r\n\r\n");
    EXPECT_EQ(r.reader.error_status(), 400) << coding;
    EXPECT_FALSE(r.reader.complete()) << coding;
    EXPECT_NE(r.reader.error().find("Transfer-Encoding"), std::string::npos) << coding;
  }
  Read ok("POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n");
  ASSERT_TRUE(ok.reader.complete()) << ok.reader.error();
  EXPECT_EQ(ok.reader.take().body, "hi");
}

TEST(RequestReader, Http11NeedsOneHostAndNoFoldedLines) {
  EXPECT_EQ(Read("GET / HTTP/1.1\r\n\r\n").reader.error_status(), 400);
  EXPECT_EQ(Read("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n").reader.error_status(), 400);
  EXPECT_TRUE(Read("GET / HTTP/1.0\r\n\r\n").reader.complete());
  Read folded("GET / HTTP/1.1\r\nHost: a\r\nX-A: one\r\n\ttwo\r\n\r\n");
  EXPECT_EQ(folded.reader.error_status(), 400);
  EXPECT_NE(folded.reader.error().find("folded"), std::string::npos);
}

TEST(OriginPolicy, HostNamesAndLoopback) {
  EXPECT_EQ(host_name("127.0.0.1:8080"), "127.0.0.1");
  EXPECT_EQ(host_name("[::1]:8080"), "::1");
  EXPECT_EQ(host_name("LocalHost."), "localhost");
  EXPECT_TRUE(is_loopback_name("127.1.2.3"));
  EXPECT_TRUE(is_loopback_name("::1"));
  EXPECT_TRUE(is_loopback_name("localhost"));
  EXPECT_FALSE(is_loopback_name("127.0.0.1.evil.com"));
  EXPECT_FALSE(is_loopback_name("128.0.0.1"));
  EXPECT_TRUE(is_json_content_type("Application/JSON; charset=utf-8"));
  EXPECT_FALSE(is_json_content_type("text/plain"));
}

TEST(OriginPolicy, OwnAndNamedOrigins) {
  const OriginPolicy policy("127.0.0.1", {{}, {"http://app.test"}});
  HttpRequest req;
  req.headers = {{"Host", "127.0.0.1:8080"}, {"Origin", "http://127.0.0.1:8080"}};
  EXPECT_NO_THROW(policy.check(req));
  EXPECT_EQ(policy.cors_origin(req), "");
  req.headers[1].second = "http://APP.test:80";
  EXPECT_NO_THROW(policy.check(req));
  EXPECT_EQ(policy.cors_origin(req), "http://APP.test:80");
  req.headers[1].second = "http://evil.test";
  EXPECT_ANY_THROW(policy.check(req));
  req.headers = {{"Host", "evil.test"}};
  EXPECT_ANY_THROW(policy.check(req));
  // Not on loopback and no names given: any Host.
  EXPECT_NO_THROW(OriginPolicy("0.0.0.0", {}).check(req));
}

}  // namespace
}  // namespace pagoda::server
