// The manifest read from disk is input: every malformed or hostile field is an error naming it.
#include <gtest/gtest.h>

#include <cstdio>

#include "ckpt/checksum.hpp"
#include "ckpt/manifest.hpp"

namespace rdmakit::ckpt::detail {
namespace {

Manifest sample() {
  Manifest m;
  m.step = 42;
  m.time_ns = 1'700'000'000'000'000'000;
  m.rank = 1;
  m.world_size = 2;
  m.chunk_bytes = 8192;
  m.files = {{"rank-00001.data", 10'000}};
  m.tensors = {{"w eight/%x", DType::F32, {10, 100}, 0, 0, 4000}, {"b", DType::U8, {}, 0, 4000, 6000}};
  m.chunks = {{0, 0, 8192, 0x1234}, {0, 8192, 1808, 0xffffffffffffffffull}};
  return m;
}

// Re-encodes after editing a field, so the checksum line is valid and the structural check must catch it.
Result<Manifest> with(void (*edit)(Manifest&)) {
  Manifest m = sample();
  edit(m);
  return decode_manifest(encode_manifest(m));
}

TEST(CkptManifest, RoundTrip) {
  auto decoded = decode_manifest(encode_manifest(sample()));
  ASSERT_TRUE(decoded) << decoded.error().describe();
  EXPECT_EQ(decoded->step, 42u);
  EXPECT_EQ(decoded->time_ns, sample().time_ns);
  EXPECT_EQ(decoded->rank, 1u);
  EXPECT_EQ(decoded->tensors[0].name, "w eight/%x");
  EXPECT_EQ(decoded->tensors[0].shape, (std::vector<std::uint64_t>{10, 100}));
  EXPECT_EQ(decoded->chunks[1].checksum, 0xffffffffffffffffull);
}

TEST(CkptManifest, TornOrFlippedTextRefusedBeforeParsing) {
  auto text = encode_manifest(sample());
  for (std::size_t cut : {std::size_t{0}, std::size_t{1}, text.size() / 2, text.size() - 1})
    EXPECT_FALSE(decode_manifest(text.substr(0, cut))) << cut;
  auto flipped = text;
  flipped[text.find("step 42") + 5] = '3';
  auto result = decode_manifest(flipped);
  ASSERT_FALSE(result);
  EXPECT_NE(result.error().message().find("checksum"), std::string::npos);
}

TEST(CkptManifest, HostileFieldsRefused) {
  EXPECT_FALSE(with([](Manifest& m) { m.files[0].name = "../../etc/passwd"; }));
  EXPECT_FALSE(with([](Manifest& m) { m.files[0].name = ".hidden"; }));
  EXPECT_FALSE(with([](Manifest& m) { m.files[0].name = "MANIFEST"; }));
  EXPECT_FALSE(with([](Manifest& m) { m.tensors[1].size = 6001; }));          // past the file's end
  EXPECT_FALSE(with([](Manifest& m) { m.tensors[1].offset = ~0ull - 10; }));  // wraps around
  EXPECT_FALSE(with([](Manifest& m) { m.tensors[0].shape = {1ull << 62, 1ull << 62}; }));  // overflows
  EXPECT_FALSE(with([](Manifest& m) { m.tensors[0].file = 5; }));
  EXPECT_FALSE(with([](Manifest& m) { m.tensors[1].name = m.tensors[0].name; }));
  EXPECT_FALSE(with([](Manifest& m) { m.chunks.pop_back(); }));        // file not covered
  EXPECT_FALSE(with([](Manifest& m) { m.chunks[1].offset = 8000; }));  // overlap
  EXPECT_FALSE(with([](Manifest& m) { m.chunks[0].size = 16384; }));   // longer than chunk_bytes
  EXPECT_FALSE(with([](Manifest& m) { m.chunk_bytes = 1000; }));
  EXPECT_FALSE(with([](Manifest& m) { m.rank = 2; }));
  EXPECT_FALSE(with([](Manifest& m) { m.world_size = 0; }));
}

// Text with a valid checksum line but bad syntax: the error names the line.
std::string sealed(const std::string& body) {
  char line[40];
  std::snprintf(line, sizeof(line), "checksum %016llx\n",
                static_cast<unsigned long long>(checksum64(body.data(), body.size())));
  return body + line;
}

TEST(CkptManifest, SyntaxErrorsNameTheLine) {
  auto text = encode_manifest(sample());
  auto body = text.substr(0, text.find("checksum "));
  ASSERT_TRUE(decode_manifest(sealed(body)));
  auto bogus = decode_manifest(sealed(body + "bogus line here\n"));
  ASSERT_FALSE(bogus);
  EXPECT_NE(bogus.error().message().find("line 12"), std::string::npos) << bogus.error().message();
  EXPECT_FALSE(decode_manifest(sealed("rdmakit-ckpt-manifest 1\nstep x\n")));
  EXPECT_FALSE(decode_manifest(sealed("rdmakit-ckpt-manifest 1\nstep 1\n")));  // fields missing
  EXPECT_FALSE(decode_manifest(sealed("something else 1\n")));
  EXPECT_FALSE(decode_manifest(sealed(body + "chunk 0 0 8192 12345\n")));  // short checksum
  auto repeated = decode_manifest(sealed(body + "step 43\n"));
  ASSERT_FALSE(repeated);
  EXPECT_NE(repeated.error().message().find("repeated"), std::string::npos);
}

TEST(CkptManifest, NamesEscapeAndUnescape) {
  EXPECT_EQ(escape_name("a b%\n"), "a%20b%25%0a");
  EXPECT_EQ(unescape_name("a%20b%25%0a").value(), "a b%\n");
  EXPECT_FALSE(unescape_name("a%2"));
  EXPECT_FALSE(unescape_name("a%zz"));
  EXPECT_FALSE(unescape_name(""));
  EXPECT_FALSE(unescape_name("a b"));
}

}  // namespace
}  // namespace rdmakit::ckpt::detail
