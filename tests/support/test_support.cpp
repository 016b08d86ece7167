#include "support/test_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "rdmakit/log.hpp"

namespace rdmakit::testing {
namespace {

std::mutex g_mutex;
std::vector<std::string> g_expected;
std::size_t g_warnings = 0;

std::uint8_t pattern_byte(std::size_t i, std::uint32_t seed) {
  // Every bit of the seed must reach the byte taken: XORing the seed into the low bits and keeping bits
  // 29-36 made every seed below 2^29 write the same bytes, so a check that a buffer changed could not fail.
  std::uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull + (std::uint64_t{seed} + 1) * 0xD1B54A32D192ED03ull;
  x ^= x >> 31;
  return static_cast<std::uint8_t>(x >> 29);
}

// Installed for the whole program: counts warnings and fails the current test on unexpected ones.
class WarningListener : public ::testing::EmptyTestEventListener {
  void OnTestStart(const ::testing::TestInfo&) override {
    std::lock_guard lock(g_mutex);
    g_expected.clear();
    g_warnings = 0;
  }
};

}  // namespace

void expect_warning(std::string fragment) {
  std::lock_guard lock(g_mutex);
  g_expected.push_back(std::move(fragment));
}

std::size_t warnings_seen() {
  std::lock_guard lock(g_mutex);
  return g_warnings;
}

void install_log_check() {
  ::testing::UnitTest::GetInstance()->listeners().Append(new WarningListener);
  set_log_sink([](LogLevel level, std::string_view subsystem, std::string_view message) {
    std::string text = "[" + std::string(subsystem) + "] " + std::string(message);
    if (level > LogLevel::Warn) return;
    bool expected = false;
    {
      std::lock_guard lock(g_mutex);
      ++g_warnings;
      for (const auto& fragment : g_expected) expected = expected || text.find(fragment) != std::string::npos;
    }
    if (!expected) ADD_FAILURE() << "unexpected rdmakit warning: " << text;
  });
}

double repeat_scale() {
  const char* text = std::getenv("RDMAKIT_TEST_REPEAT_SCALE");
  if (!text || !*text) return 1.0;
  char* end = nullptr;
  double scale = std::strtod(text, &end);
  return end && *end == '\0' && scale > 0 && scale <= 1 ? scale : 1.0;
}

int scaled_repeats(int count, int minimum) {
  int scaled = static_cast<int>(count * repeat_scale() + 0.5);
  return std::max(std::min(count, minimum), scaled);
}

void fill_pattern(void* data, std::size_t size, std::uint32_t seed) {
  auto* bytes = static_cast<std::uint8_t*>(data);
  for (std::size_t i = 0; i < size; ++i) bytes[i] = pattern_byte(i, seed);
}

std::size_t find_pattern_mismatch(const void* data, std::size_t size, std::uint32_t seed) {
  const auto* bytes = static_cast<const std::uint8_t*>(data);
  for (std::size_t i = 0; i < size; ++i)
    if (bytes[i] != pattern_byte(i, seed)) return i;
  return size;
}

}  // namespace rdmakit::testing
