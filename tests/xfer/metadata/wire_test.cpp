// The metadata backends' decoders (RESP, HTTP/1.1, JSON, base64) and the bootstrap store's leased keys,
// without a server.
#include <gtest/gtest.h>

#include <thread>

#include "bootstrap/store_session.hpp"
#include "bootstrap/store_wire.hpp"
#include "xfer/metadata/http.hpp"
#include "xfer/metadata/resp.hpp"

namespace rdmakit::xfer::metadata {
namespace {

using namespace std::chrono_literals;

TEST(Resp, DecodesEveryTypeAndWaitsForTheRest) {
  std::string reply = "*3\r\n$5\r\nhel\r\n\r\n:-42\r\n*2\r\n+OK\r\n$-1\r\n";
  for (std::size_t cut = 0; cut < reply.size(); ++cut) {
    std::size_t consumed = 0;
    auto partial = resp::parse(std::string_view(reply).substr(0, cut), consumed);
    ASSERT_TRUE(partial) << cut;
    EXPECT_FALSE(*partial) << "complete after only " << cut << " bytes";
  }
  std::size_t consumed = 0;
  auto value = resp::parse(reply + "+next\r\n", consumed);
  ASSERT_TRUE(value && *value);
  EXPECT_EQ(consumed, reply.size());
  const auto& array = **value;
  ASSERT_EQ(array.kind, resp::Value::Kind::Array);
  ASSERT_EQ(array.elements.size(), 3u);
  EXPECT_EQ(array.elements[0].text, "hel\r\n");  // binary-safe bulk string
  EXPECT_EQ(array.elements[1].integer, -42);
  EXPECT_EQ(array.elements[2].elements[0].text, "OK");
  EXPECT_EQ(array.elements[2].elements[1].kind, resp::Value::Kind::Nil);
}

TEST(Resp, RefusesMalformedReplies) {
  std::string deep;
  for (int i = 0; i < 20; ++i) deep += "*1\r\n";  // nesting past kMaxDepth
  for (std::string bad : std::vector<std::string>{"?\r\n", "+OK\n", ":12x\r\n", "$-2\r\n", "$3\r\nabcd\r\n",
                                                  "*-5\r\n", "$99999999999999\r\n", "*2000000\r\n", deep}) {
    std::size_t consumed = 0;
    auto value = resp::parse(bad, consumed);
    ASSERT_FALSE(value) << bad;
    EXPECT_EQ(value.error().code(), Errc::ProtocolError);
  }
}

TEST(Resp, EncodesCommandsAsBulkArrays) {
  EXPECT_EQ(resp::command({"SET", std::string_view("a\0b", 3)}),
            std::string("*2\r\n$3\r\nSET\r\n$3\r\na\0b\r\n", 22));
}

TEST(Http, DecodesLengthAndChunkedBodies) {
  std::string plain = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\ncontent-length: 4\r\n\r\n{}{}";
  std::string chunked =
      "HTTP/1.1 404 Not Found\r\nTransfer-Encoding: "
      "chunked\r\n\r\n3;x=y\r\n{\"a\r\n2\r\n\"}\r\n0\r\nGrpc-Trailer: x\r\n\r\n";
  for (const auto& [reply, status, body] :
       {std::tuple{plain, 200, std::string("{}{}")}, {chunked, 404, "{\"a\"}"}}) {
    for (std::size_t cut = 0; cut < reply.size(); ++cut) {
      std::size_t consumed = 0;
      auto partial = http::parse_response(std::string_view(reply).substr(0, cut), consumed);
      ASSERT_TRUE(partial) << cut << ": " << partial.error().message();
      EXPECT_FALSE(*partial) << cut;
    }
    std::size_t consumed = 0;
    auto response = http::parse_response(reply + "HTTP/1.1", consumed);
    ASSERT_TRUE(response && *response);
    EXPECT_EQ(consumed, reply.size());
    EXPECT_EQ((*response)->status, status);
    EXPECT_EQ((*response)->body, body);
  }
}

TEST(Http, RefusesMalformedResponses) {
  for (std::string bad : {"SSH-2.0-OpenSSH\r\n\r\n", "HTTP/1.1 2000 OK\r\n\r\n", "HTTP/1.1 200 OK\r\n\r\n",
                          "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
                          "HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n",
                          "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
                          "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                          "HTTP/1.1 200 OK\r\nbad header\r\n\r\n", "garbage that is not HTTP"}) {
    std::size_t consumed = 0;
    auto response = http::parse_response(bad, consumed);
    ASSERT_FALSE(response) << bad;
    EXPECT_EQ(response.error().code(), Errc::ProtocolError);
  }
}

TEST(Json, ParsesWhatTheGatewaySends) {
  auto value = json::parse(
      R"({"header":{"revision":"2"},"kvs":[{"key":"Zm9v","value":"YmFy"}],"count":"1","more":false,)"
      R"("s":"\u00e9\ud83d\ude00\n\"","n":-1.5e3,"z":null})");
  ASSERT_TRUE(value) << value.error().message();
  EXPECT_EQ(value->find("count")->text, "1");
  EXPECT_EQ(value->find("kvs")->elements[0].find("key")->text, "Zm9v");
  EXPECT_EQ(value->find("s")->text, "\xc3\xa9\xf0\x9f\x98\x80\n\"");
  EXPECT_EQ(value->find("n")->text, "-1.5e3");
  EXPECT_EQ(value->find("absent"), nullptr);
  EXPECT_EQ(json::parse(json::quote(std::string("a\"\\\x01", 4)))->text, std::string("a\"\\\x01", 4));
}

TEST(Json, RefusesMalformedText) {
  std::string deep(100, '[');
  for (std::string bad : std::vector<std::string>{"", "{", "{\"a\"}", "{\"a\":1,}", "[1 2]", "\"\\x\"",
                                                  "\"\\ud800\"", "tru", "-", "{} x", "\"a\nb\"", deep}) {
    auto value = json::parse(bad);
    ASSERT_FALSE(value) << bad;
    EXPECT_EQ(value.error().code(), Errc::ProtocolError);
  }
}

TEST(Base64, RoundTripsAndRefusesNonCanonicalText) {
  for (std::string bytes :
       std::vector<std::string>{"", "f", "fo", "foo", "foob", std::string("\0\xff\x10", 3)})
    EXPECT_EQ(base64::decode(base64::encode(bytes)), bytes);
  EXPECT_EQ(base64::encode("foo"), "Zm9v");
  for (const char* bad : {"Zm9", "Zm9v=", "Z===", "Zm8!", "Zh==", "Zm9=Zm9v"})
    EXPECT_EQ(base64::decode(bad), std::nullopt) << bad;
}

// The bootstrap store's leased keys: mutable, expiring, and never a way around the write-once keys.
TEST(StoreLeases, ExpireAndNeverShadowWriteOnceKeys) {
  bootstrap::StoreData data(bootstrap::StoreLimits{.max_bytes = 100});
  ASSERT_TRUE(data.set("rank0", "addr"));
  EXPECT_FALSE(data.put_leased("rank0", "mine now", 1s));
  EXPECT_FALSE(data.erase_leased("rank0"));
  EXPECT_EQ(*data.find("rank0"), "addr");

  ASSERT_TRUE(data.put_leased("ns/a", "1", 50ms));
  ASSERT_TRUE(data.put_leased("ns/a", "22", 50ms));  // replaced, not added
  EXPECT_EQ(data.bytes(), 5u + 4u + 4u + 2u);        // rank0=addr, ns/a=22
  EXPECT_FALSE(data.set("ns/a", "x"));               // a live leased key is not taken over by SET
  EXPECT_TRUE(data.renew_leased("ns/a", 50ms));
  EXPECT_EQ(*data.keys("ns/", 1000), std::vector<std::string>{"ns/a"});
  std::this_thread::sleep_for(80ms);
  EXPECT_EQ(data.find("ns/a"), nullptr);
  EXPECT_FALSE(data.renew_leased("ns/a", 50ms));
  EXPECT_TRUE(data.keys("ns/", 1000)->empty());
  EXPECT_EQ(data.bytes(), 9u);  // the sweep gave its bytes back

  // The byte cap counts leased keys too.
  EXPECT_EQ(data.put_leased("big", std::string(100, 'x'), 1s).error().code(), Errc::ResourceExhausted);
}

TEST(StoreLeases, RequestsOverTheWire) {
  bootstrap::StoreData data(bootstrap::StoreLimits{});
  std::string ttl;
  bootstrap::wire::put_u32(ttl, 1000);
  std::string zero;
  bootstrap::wire::put_u32(zero, 0);
  auto serve = [&](bootstrap::wire::Op op, std::string_view key, std::string_view value) {
    // A session that has already authenticated is not reachable from here; the server's dispatch of a
    // decoded request is what runs (as the fuzz target drives it).
    bootstrap::wire::Request request;
    std::string bytes = bootstrap::wire::request(op, key, value), error;
    EXPECT_EQ(bootstrap::wire::decode_request(bytes, 1 << 20, request, error),
              bootstrap::wire::Decode::Ready);
    std::string out;
    bootstrap::StoreSession::serve_request(request, data, out);
    bootstrap::wire::Reply reply;
    EXPECT_EQ(bootstrap::wire::decode_reply(out, 1 << 20, reply), bootstrap::wire::Decode::Ready);
    return std::pair{reply.status, std::string(reply.payload)};
  };
  using namespace bootstrap::wire;
  EXPECT_EQ(serve(kPut, "ns/k", ttl + "v").first, kOk);
  EXPECT_EQ(serve(kGet, "ns/k", "").second, "v");
  EXPECT_EQ(serve(kRenew, "ns/k", ttl).first, kOk);
  EXPECT_EQ(serve(kRenew, "ns/other", ttl).first, kNotFound);
  EXPECT_EQ(serve(kPut, "ns/k", zero + "v").first, kError);  // a ttl of 0
  EXPECT_EQ(serve(kPut, "ns/k", "v").first, kError);         // no ttl at all
  std::string list = serve(kList, "ns/", "").second;
  EXPECT_EQ(list, std::string("\x04\0\0\0ns/k", 8));
  EXPECT_EQ(serve(kErase, "ns/k", "").first, kOk);
  EXPECT_EQ(serve(kGet, "ns/k", "").first, kNotFound);
}

}  // namespace
}  // namespace rdmakit::xfer::metadata
