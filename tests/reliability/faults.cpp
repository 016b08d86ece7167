// The fault matrix (issue 15): a peer process killed (SIGKILL) in the middle of WRITEs, READs, atomics or
// SENDs, or stopped (SIGSTOP) for less or for more than the timeout and then resumed.
//   reliability_faults <case> <transport>        (cases: see kCases below)
// Every case asserts that nothing hangs beyond the configured timeout (detection_bound: the timeout plus
// max(1 s, timeout / 2), plus RDMAKIT_TEST_FAULT_SLACK_MS under the sanitizers), that every
// completion reporting success has its bytes in place (the peer's memory is a memfd this process maps too,
// so it is read even after the peer died), that the statuses are successes, then one failure, then only
// Flushed, and that neither side's memory changed outside the ranges the operations touch. It prints the
// time to detection ("DETECT <case> <transport> <ms> ms"): from the kill (or, for a stopped peer, from the
// post) to the first failed completion. No timing is asserted beyond the bound; the timeouts are small so
// the cases are quick.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <thread>

#include "reliability/fault_ops.hpp"
#include "reliability/linkcut.hpp"

namespace rdmakit::faults {
namespace {

using namespace std::chrono_literals;

constexpr unsigned kWatchdogSeconds = 120;

// Each case returns "" or what failed.
using Case = std::function<std::string(const std::string& transport)>;

long ms(Clock::duration d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); }

void report_detection(const char* name, const std::string& transport, Clock::duration detection) {
  std::printf("DETECT %s %s %ld ms\n", name, transport.c_str(), ms(detection));
}

// A batch of `count` operations, the i-th posted by `post(rig, i)`. The first quarter is posted and its
// completions collected (checked like the rest): so there are successes whose bytes must have landed. Then
// the rest is posted and the peer killed at once, while they are in flight. Under load the rest can finish
// before the kill (shm is fast), so one more operation (`post(rig, count)`) is posted after the kill, and it
// must fail.
std::string kill_case(const char* name, const std::string& transport, std::size_t count,
                      const std::function<std::string(Rig&, std::size_t index)>& post) {
  Rig rig;
  if (auto bad = rig.start(transport, 2000ms); !bad.empty()) return bad;
  std::size_t quarter = count / 4;
  for (std::size_t i = 0; i < quarter; ++i)
    if (auto bad = post(rig, i); !bad.empty()) return bad;
  if (auto bad = rig.collect(Clock::now() + rig.timeout + kHangSlack); !bad.empty()) return bad;
  for (std::size_t i = 0; i < quarter; ++i)
    if (rig.ops[i].status != Status::Success)
      return "operation #" + std::to_string(i) + " completed " + std::string(to_string(rig.ops[i].status)) +
             " before the peer was killed";
  for (std::size_t i = quarter; i < count; ++i)
    if (auto bad = post(rig, i); !bad.empty()) return bad;
  std::uint64_t in_flight = rig.connection->stats().outstanding;
  auto killed = Clock::now();
  rig.peer.signal(SIGKILL);
  if (auto bad = post(rig, count); !bad.empty()) return bad;
  if (auto bad = rig.collect(killed + rig.timeout + kHangSlack); !bad.empty()) return bad;
  if (auto bad = check_status_order(rig, true); !bad.empty()) return bad;
  if (rig.connection->health()) return "the connection is healthy after its peer died";
  std::size_t succeeded = 0;
  for (const Op& op : rig.ops) succeeded += op.status == Status::Success;
  std::printf(
      "%s %s: %zu of %zu operations succeeded (%zu collected before the kill, %llu in flight at it)\n", name,
      transport.c_str(), succeeded, rig.ops.size(), quarter, static_cast<unsigned long long>(in_flight));
  auto detection = rig.first_failure() - killed;
  report_detection(name, transport, detection);
  if (auto bad = check_bound("detecting the kill", detection, rig.timeout); !bad.empty()) return bad;
  return check_memory(rig, false);
}

// WRITEs and READs of 1 MiB over the data area [0, 31 MiB), kPasses times (the one after the kill: at
// 31 MiB): shm copies 31 MiB in a few milliseconds, less than a kill takes, so the batch is long enough to be
// cut. Every pass moves the same bytes to the same place, so a range stays checkable whichever pass last
// touched it.
constexpr int kPasses = 8;
constexpr std::size_t kChunks = 31;

std::string kill_mid_write(const std::string& transport) {
  return kill_case("kill_mid_write", transport, kPasses * kChunks, [](Rig& rig, std::size_t i) {
    return rig.write(i == kPasses * kChunks ? kChunks * kMiB : (i % kChunks) * kMiB, kMiB);
  });
}

std::string kill_mid_read(const std::string& transport) {
  return kill_case("kill_mid_read", transport, kPasses * kChunks, [](Rig& rig, std::size_t i) {
    return rig.read(i == kPasses * kChunks ? kChunks * kMiB : (i % kChunks) * kMiB, kMiB);
  });
}

// fetch_add and compare_swap alternating: 1000, within the send queue's default depth (1024).
std::string kill_mid_atomic(const std::string& transport) {
  return kill_case("kill_mid_atomic", transport, 1000,
                   [](Rig& rig, std::size_t i) { return i % 2 == 0 ? rig.fetch_add() : rig.compare_swap(); });
}

// SENDs of 256 KiB (above the 64 KiB that shm carries inside post()), one per receive the peer posted.
std::string kill_mid_send(const std::string& transport) {
  return kill_case("kill_mid_send", transport, kSlotCount - 1,
                   [](Rig& rig, std::size_t) { return rig.send(kSlotSize); });
}

// Stopped for a tenth of the timeout: every operation completes after the resume, bytes exact, the
// counters exact (nothing applied twice), each SEND in its own receive.
std::string stop_short(const std::string& transport) {
  Rig rig;
  if (auto bad = rig.start(transport, 3000ms); !bad.empty()) return bad;
  rig.peer.signal(SIGSTOP);
  if (auto bad = rig.post_mix(0); !bad.empty()) return bad;
  std::this_thread::sleep_for(rig.timeout / 10);  // the fault itself, not a synchronisation
  auto resumed = Clock::now();
  rig.peer.signal(SIGCONT);
  if (auto bad = rig.collect(resumed + rig.timeout + kHangSlack); !bad.empty()) return bad;
  for (std::size_t i = 0; i < rig.ops.size(); ++i)
    if (rig.ops[i].status != Status::Success)
      return "operation #" + std::to_string(i) + " completed " + std::string(to_string(rig.ops[i].status)) +
             " after a stop shorter than the timeout";
  std::printf("stop_short %s: %zu operations completed %ld ms after the resume\n", transport.c_str(),
              rig.ops.size(), ms(rig.ops.back().done - resumed));
  if (auto bad = check_bound("completing after the resume", rig.ops.back().done - resumed, rig.timeout);
      !bad.empty())
    return bad;
  rig.connection->close();
  if (!rig.peer.finish()) return "the peer did not exit cleanly";
  return check_memory(rig, true);
}

// Stopped past the timeout: what needs the peer's CPU fails with a clear status within detection_bound (not
// much before the timeout: the peer is slow, not known dead); after the resume a new connection carries a
// WRITE.
std::string stop_long(const std::string& transport) {
  Rig rig;
  if (auto bad = rig.start(transport, 1000ms); !bad.empty()) return bad;
  rig.peer.signal(SIGSTOP);
  auto posted = Clock::now();
  if (auto bad = rig.post_mix(0); !bad.empty()) return bad;
  if (auto bad = rig.collect(posted + rig.timeout + kHangSlack); !bad.empty()) return bad;
  if (auto bad = check_status_order(rig, true); !bad.empty()) return bad;
  auto detection = rig.first_failure() - posted;
  if (detection < rig.timeout / 2)
    return "a stopped peer was given up after " + std::to_string(ms(detection)) + " ms, before the timeout";
  report_detection("stop_long", transport, detection);
  if (auto bad = check_bound("detecting the stop", detection, rig.timeout); !bad.empty()) return bad;
  rig.peer.signal(SIGCONT);
  if (rig.connection->health()) return "the connection is healthy after its operations failed";
  auto again = rig.context->connect(rig.peer.address());
  if (!again) return "connect after the resume: " + again.error().describe();
  if (!rig.peer.accepted()) return "the resumed peer did not accept";
  rig.connection = *again;
  if (auto bad = rig.write(20 * kMiB, 64 << 10); !bad.empty()) return bad;
  if (auto bad = rig.collect(Clock::now() + rig.timeout + kHangSlack); !bad.empty()) return bad;
  if (rig.ops.back().status != Status::Success)
    return "a WRITE on a new connection after the resume completed " +
           std::string(to_string(rig.ops.back().status));
  rig.connection->close();
  if (!rig.peer.finish()) return "the peer did not exit cleanly";
  return check_memory(rig, false);
}

const std::map<std::string, Case>& cases() {
  static const std::map<std::string, Case> all{
      {"kill_mid_write", kill_mid_write},   {"kill_mid_read", kill_mid_read},
      {"kill_mid_atomic", kill_mid_atomic}, {"kill_mid_send", kill_mid_send},
      {"stop_short", stop_short},           {"stop_long", stop_long},
      {"linkcut_short", linkcut_short},     {"linkcut_long", linkcut_long}};
  return all;
}

}  // namespace
}  // namespace rdmakit::faults

int main(int argc, char** argv) {
  using namespace rdmakit::faults;
  if (argc > 1 && std::strcmp(argv[1], "--peer") == 0) return run_peer(argc, argv);
  auto found = argc == 3 ? cases().find(argv[1]) : cases().end();
  if (found == cases().end()) {
    std::fprintf(stderr, "usage: reliability_faults <case> <transport>; cases:");
    for (const auto& [name, unused] : cases()) std::fprintf(stderr, " %s", name.c_str());
    std::fprintf(stderr, "\n");
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  alarm(kWatchdogSeconds);  // a hang beyond every bound ends the program with SIGALRM: a failure
  std::string failure = found->second(argv[2]);
  if (failure == kSkipped) return kSkipExit;
  if (!failure.empty()) {
    std::fprintf(stderr, "reliability_faults %s %s: FAIL: %s\n", argv[1], argv[2], failure.c_str());
    return 1;
  }
  std::printf("reliability_faults %s %s: PASS\n", argv[1], argv[2]);
  return 0;
}
