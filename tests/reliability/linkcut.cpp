// Link cuts between two network namespaces (linkcut.hpp).
#include "reliability/linkcut.hpp"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "reliability/fault_ops.hpp"

extern char** environ;

namespace rdmakit::faults {
namespace {

using namespace std::chrono_literals;

long ms(Clock::duration d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); }

// Runs `ip <args...>` quietly; true when it exits 0.
bool ip(std::vector<std::string> args) {
  std::vector<char*> argv{const_cast<char*>("/usr/sbin/ip")};
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid;
  int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  int status = 0;
  return rc == 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// Namespace <prefix>p holds the peer (10.79.0.1 on <prefix>p), <prefix>s this process (10.79.0.2); removed
// when this goes out of scope.
class LinkedNamespaces {
 public:
  // "" when made and entered, kSkipped when this machine does not let us, else what failed.
  std::string make() {
    if (!ip({"netns", "add", peer_ns()})) return kSkipped;
    made_ = true;
    if (!ip({"netns", "add", self_ns()})) return "ip netns add " + self_ns() + " failed";
    if (!ip({"link", "add", prefix_ + "p", "netns", peer_ns(), "type", "veth", "peer", "name", prefix_ + "s",
             "netns", self_ns()}) ||
        !ip({"-n", peer_ns(), "addr", "add", "10.79.0.1/24", "dev", prefix_ + "p"}) ||
        !ip({"-n", self_ns(), "addr", "add", "10.79.0.2/24", "dev", prefix_ + "s"}) ||
        !ip({"-n", peer_ns(), "link", "set", prefix_ + "p", "up"}) ||
        !ip({"-n", self_ns(), "link", "set", prefix_ + "s", "up"}) ||
        !ip({"-n", peer_ns(), "link", "set", "lo", "up"}))
      return "could not set up the veth pair";
    // This thread (the only one so far) moves into its namespace; threads made later inherit it.
    int fd = ::open(("/run/netns/" + self_ns()).c_str(), O_RDONLY | O_CLOEXEC);
    bool entered = fd >= 0 && ::setns(fd, CLONE_NEWNET) == 0;
    if (fd >= 0) ::close(fd);
    return entered ? "" : "setns into " + self_ns() + " failed";
  }
  bool set_link(bool up) { return ip({"-n", peer_ns(), "link", "set", prefix_ + "p", up ? "up" : "down"}); }
  std::string peer_ns() const { return prefix_ + "n1"; }
  std::string self_ns() const { return prefix_ + "n2"; }
  ~LinkedNamespaces() {
    if (!made_) return;
    ip({"netns", "del", peer_ns()});
    ip({"netns", "del", self_ns()});
  }

 private:
  std::string prefix_ = "rkf" + std::to_string(::getpid());
  bool made_ = false;
};

std::string start(const std::string& transport, LinkedNamespaces& net, Rig& rig,
                  std::chrono::milliseconds timeout) {
  if (auto bad = net.make(); !bad.empty()) {
    if (bad != kSkipped) return bad;
    const char* ci = std::getenv("CI");
    if (ci && *ci)
      return "cannot create network namespaces (needs CAP_SYS_ADMIN), and CI is set: not skipped";
    std::printf("SKIP: cannot create network namespaces here (needs CAP_SYS_ADMIN)\n");
    return bad;
  }
  return rig.start(transport, timeout, "10.79.0.1:0", net.peer_ns());
}

// A link cut between network namespaces reaches only a transport that goes between hosts over IP addresses
// (tcp; verbs would need an RDMA device on the veth pair).
std::string needs_network(const std::string& transport) {
  auto probe = Context::open(Options{.transport = transport});
  if (!probe) return "open " + transport + ": " + probe.error().describe();
  const Capabilities caps = (*probe)->capabilities();
  if (caps.same_host_only || !caps.address_prefix.empty())
    return "a link cut needs a transport that reaches other hosts by IP address, not " + transport;
  return "";
}

}  // namespace

std::string linkcut_short(const std::string& transport) {
  if (auto bad = needs_network(transport); !bad.empty()) return bad;
  LinkedNamespaces net;
  Rig rig;
  if (auto bad = start(transport, net, rig, 6000ms); !bad.empty()) return bad;
  if (auto bad = rig.post_mix(0); !bad.empty()) return bad;
  if (!net.set_link(false)) return "ip link set down failed";
  if (auto bad = rig.post_mix(1); !bad.empty()) return bad;  // posted into the cut
  std::this_thread::sleep_for(rig.timeout / 10);             // the fault itself, not a synchronisation
  if (!net.set_link(true)) return "ip link set up failed";
  auto restored = Clock::now();
  if (auto bad = rig.post_mix(2); !bad.empty()) return bad;
  if (auto bad = rig.collect(restored + rig.timeout + kHangSlack); !bad.empty()) return bad;
  for (std::size_t i = 0; i < rig.ops.size(); ++i)
    if (rig.ops[i].status != Status::Success)
      return "operation #" + std::to_string(i) + " completed " + std::string(to_string(rig.ops[i].status)) +
             " across a cut shorter than the timeout";
  std::printf(
      "linkcut_short %s: %zu operations rode out a %ld ms cut, the last done %ld ms after the restore\n",
      transport.c_str(), rig.ops.size(), ms(rig.timeout / 10), ms(rig.ops.back().done - restored));
  if (auto bad = check_bound("completing after the restore", rig.ops.back().done - restored, rig.timeout);
      !bad.empty())
    return bad;
  rig.connection->close();
  if (!rig.peer.finish()) return "the peer did not exit cleanly";
  return check_memory(rig, true);  // the atomics' old values and the counters: nothing lost or doubled
}

std::string linkcut_long(const std::string& transport) {
  if (auto bad = needs_network(transport); !bad.empty()) return bad;
  LinkedNamespaces net;
  Rig rig;
  if (auto bad = start(transport, net, rig, 1500ms); !bad.empty()) return bad;
  if (!net.set_link(false)) return "ip link set down failed";
  auto posted = Clock::now();
  if (auto bad = rig.post_mix(0); !bad.empty()) return bad;
  if (auto bad = rig.collect(posted + rig.timeout + kHangSlack); !bad.empty()) return bad;
  if (auto bad = check_status_order(rig, true); !bad.empty()) return bad;
  auto detection = rig.first_failure() - posted;
  if (detection < rig.timeout / 2)
    return "a cut link was given up after " + std::to_string(ms(detection)) + " ms, before the timeout";
  std::printf("DETECT linkcut_long %s %ld ms\n", transport.c_str(), ms(detection));
  if (auto bad = check_bound("detecting the cut", detection, rig.timeout); !bad.empty()) return bad;
  if (!net.set_link(true)) return "ip link set up failed";
  auto again = rig.context->connect(rig.peer.address());
  if (!again) return "connect after the restore: " + again.error().describe();
  if (!rig.peer.accepted()) return "the peer did not accept after the restore";
  rig.connection = *again;
  if (auto bad = rig.write(20 * kMiB, 64 << 10); !bad.empty()) return bad;
  if (auto bad = rig.collect(Clock::now() + rig.timeout + kHangSlack); !bad.empty()) return bad;
  if (rig.ops.back().status != Status::Success)
    return "a WRITE on a new connection after the restore completed " +
           std::string(to_string(rig.ops.back().status));
  rig.connection->close();
  if (!rig.peer.finish()) return "the peer did not exit cleanly";
  return check_memory(rig, false);
}

}  // namespace rdmakit::faults
