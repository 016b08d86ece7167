// A hostile peer guessing memory keys (finding 8: keys were sequential, so one rkey revealed its
// neighbours'). With one valid rkey in hand it tries every key within +-N of it and M random keys, then
// keys at the strides of known key layouts and every lkey used as an rkey, each against every registered
// region of the target, by READ and by WRITE: every guess must complete with RemoteAccess, and the
// target's memory must stay as it was.
//
// A remote access error moves the connection to the error state (verbs' rule), so each guess takes a
// connection of its own. N and M default to 1000 and 10^4 (the figures);
// RDMAKIT_CONFORMANCE_KEY_GUESSES="N,M" scales them down where connections are slow (emulated RDMA: the
// Soft-RoCE VM sets it).
#include <algorithm>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <random>
#include <set>

#include "conformance/fixture.hpp"

namespace rdmakit::conformance {
namespace {

struct GuessCounts {
  std::int64_t radius = 1000;
  std::size_t random = 10000;
};

GuessCounts guess_counts() {
  GuessCounts counts;
  if (const char* text = std::getenv("RDMAKIT_CONFORMANCE_KEY_GUESSES")) {
    long long radius = 0, random = 0;
    if (std::sscanf(text, "%lld,%lld", &radius, &random) == 2 && radius >= 0 && random >= 0)
      counts = {radius, static_cast<std::size_t>(random)};
    else
      ADD_FAILURE() << "RDMAKIT_CONFORMANCE_KEY_GUESSES must be N,M; got '" << text << "'";
  }
  return counts;
}

// Accepts every connection the guesser makes and keeps the last few alive until the guess using each
// one has completed (the guesser waits for each before it connects again).
class Acceptor {
 public:
  explicit Acceptor(std::shared_ptr<Listener> listener)
      : listener_(std::move(listener)), thread_([this] { run(); }) {}
  ~Acceptor() {
    stop_ = true;
    thread_.join();
  }
  std::string address() const { return listener_->address(); }

 private:
  void run() {
    while (!stop_) {
      auto c = listener_->accept(100ms);
      if (!c) continue;
      recent_.push_back(std::move(*c));
      if (recent_.size() > 4) recent_.pop_front();
    }
  }

  std::shared_ptr<Listener> listener_;
  std::deque<std::shared_ptr<Connection>> recent_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

class KeyGuessing : public Conformance {
 protected:
  static constexpr std::size_t kRegions = 4, kBytes = 256;

  // Opens both contexts and registers kRegions patterned targets on the server. A random key that lands
  // within `radius` of region 0's by chance (4 x 2000 / 2^32) is drawn again, so that a test cannot fail
  // by luck; sequential keys stay near however often they are drawn, and are caught.
  void SetUpTargets(std::int64_t radius) {
    server_.context = open_context(true);
    client_.context = open_context(false);
    ASSERT_TRUE(server_.context && client_.context);
    constexpr Access kAll = Access::LocalWrite | Access::RemoteWrite | Access::RemoteRead;
    auto near_first = [&](std::uint32_t rkey) {
      auto distance = static_cast<std::int64_t>(rkey) - static_cast<std::int64_t>(targets_[0]->rkey());
      return std::abs(distance) <= radius;
    };
    for (std::size_t i = 0; i < kRegions; ++i) {
      targets_.push_back(region(*server_.context, kBytes, kAll));
      ASSERT_TRUE(targets_.back());
      for (int redraw = 0; i > 0 && redraw < 3 && near_first(targets_.back()->rkey()); ++redraw) {
        targets_.back() = region(*server_.context, kBytes, kAll);
        ASSERT_TRUE(targets_.back());
      }
      testing::fill_pattern(targets_.back()->data(), kBytes, 100 + i);
      valid_.insert(targets_.back()->rkey());
    }
    local_ = region(*client_.context, kBytes, Access::LocalWrite);
    ASSERT_TRUE(local_);
  }

  // Tries every guess as the rkey of every target, by READ and by WRITE: each must complete with
  // RemoteAccess, and the targets' memory must stay as it was.
  void ExpectAllRefused(const std::vector<std::uint32_t>& guesses) {
    Acceptor acceptor(RDMAKIT_ASSERT_OK(server_.context->listen()));
    const auto start = std::chrono::steady_clock::now();
    std::size_t tried = 0, opened = 0;
    for (std::size_t g = 0; g < guesses.size(); ++g) {
      for (std::size_t t = 0; t < targets_.size(); ++t, ++tried) {
        auto connection = RDMAKIT_ASSERT_OK(client_.context->connect(acceptor.address()));
        RemoteAddress remote = targets_[t]->descriptor().at(0);
        remote.rkey = guesses[g];
        Segment segment = local_->slice(0, 64);
        const bool read = (g + t) % 2;
        auto id =
            RDMAKIT_ASSERT_OK(read ? connection->read(segment, remote) : connection->write(segment, remote));
        Completion done = wait(*connection, id);
        if (done.status != Status::RemoteAccess) {
          ++opened;
          ADD_FAILURE() << (read ? "READ" : "WRITE") << " with key " << guesses[g]
                        << " (valid: " << targets_[0]->rkey() << ") on region " << t << " completed with "
                        << to_string(done.status);
          if (opened > 5) return;
        }
      }
    }
    for (std::size_t i = 0; i < kRegions; ++i)
      EXPECT_EQ(testing::find_pattern_mismatch(targets_[i]->data(), kBytes, 100 + i), kBytes)
          << "region " << i;
    auto seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("[ key guessing ] %zu guesses x %zu regions = %zu operations in %.1f s\n", guesses.size(),
                kRegions, tried, seconds);
  }

  std::vector<std::shared_ptr<MemoryRegion>> targets_;
  std::set<std::uint32_t> valid_;  // every region's rkey
  std::shared_ptr<MemoryRegion> local_;
};

TEST_P(KeyGuessing, NeighbouringAndRandomKeysGetRemoteAccessOnly) {
  GuessCounts counts = guess_counts();
  // A device's keys (verbs) follow its own rule, a region index and 8 random bits on rxe and mlx5: their
  // neighbours are guessable by design and the protection is the protection domain. Random keys still
  // must fail.
  SetUpTargets(counts.radius);
  if (HasFatalFailure()) return;
  if (server_.context->capabilities().device_keys) counts.radius = 0;
  // The guesser holds region 0's rkey only. Its neighbours are all tried, even one that is another
  // region's key (never, with random keys redrawn above; every time with sequential keys). A random guess
  // that hits a valid key by chance is no finding: skipped.
  std::vector<std::uint32_t> guesses;
  const std::uint32_t known = targets_[0]->rkey();
  for (std::int64_t d = -counts.radius; d <= counts.radius; ++d)
    if (d != 0) guesses.push_back(static_cast<std::uint32_t>(static_cast<std::int64_t>(known) + d));
  std::mt19937 random(std::random_device{}());
  for (std::size_t i = 0; i < counts.random; ++i)
    if (auto key = static_cast<std::uint32_t>(random()); !valid_.contains(key)) guesses.push_back(key);
  ExpectAllRefused(guesses);
}

// Keys built from a known one by the strides of key layouts (shm's were (generation << 14) | slot, so
// 0x4001 apart; an index in the low byte or half), and every region's lkey used as an rkey: all refused.
// Skipped on verbs, where the device makes the keys (an lkey is often its rkey there).
TEST_P(KeyGuessing, KeysAtLayoutStridesAndLocalKeysGetRemoteAccessOnly) {
  SetUpTargets(0);
  if (HasFatalFailure()) return;
  if (server_.context->capabilities().device_keys) GTEST_SKIP() << "the device makes the keys (device_keys)";
  const std::uint32_t known = targets_[0]->rkey();
  std::vector<std::uint32_t> guesses;
  for (std::uint32_t stride : {0x4001u, 0x4000u, 0x100u, 0x10000u, 0x1000000u})
    for (std::int64_t k = -8; k <= 8; ++k)
      if (k != 0) guesses.push_back(known + static_cast<std::uint32_t>(k * stride));
  for (const auto& target : targets_) {
    EXPECT_NE(target->lkey(), target->rkey()) << "an lkey equals its rkey";
    guesses.push_back(target->lkey());
  }
  ExpectAllRefused(guesses);
}

INSTANTIATE_TEST_SUITE_P(Transports, KeyGuessing, ::testing::ValuesIn(conformance_transports()),
                         transport_param_name);

}  // namespace
}  // namespace rdmakit::conformance
