#include "servers.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <thread>
#include <utility>

namespace rdmakit::xfer::testing {

Process Process::spawn(const std::vector<std::string>& argv, const std::string& log, bool capture_stdout) {
  int pipe_fds[2] = {-1, -1};
  if (capture_stdout && ::pipe2(pipe_fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {  // only async-signal-safe calls from here to exec
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      ::dup2(fd, 2);
      if (!capture_stdout) ::dup2(fd, 1);
    }
    if (capture_stdout) ::dup2(pipe_fds[1], 1);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  if (capture_stdout) ::close(pipe_fds[1]);
  return Process(pid, pipe_fds[0]);
}

Process::Process(Process&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      out_(std::exchange(other.out_, -1)),
      pending_(std::move(other.pending_)) {}

Process& Process::operator=(Process&& other) noexcept {
  if (this != &other) {
    kill_now();
    pid_ = std::exchange(other.pid_, -1);
    out_ = std::exchange(other.out_, -1);
    pending_ = std::move(other.pending_);
  }
  return *this;
}

Process::~Process() { kill_now(); }

void Process::kill_now() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  if (out_ >= 0) ::close(std::exchange(out_, -1));
}

std::optional<std::string> Process::read_line(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (auto end = pending_.find('\n'); end != std::string::npos) {
      std::string line = pending_.substr(0, end);
      pending_.erase(0, end + 1);
      return line;
    }
    auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (out_ < 0 || left.count() <= 0) return std::nullopt;
    pollfd p{out_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char chunk[256];
    ssize_t n = ::read(out_, chunk, sizeof(chunk));
    if (n <= 0) return std::nullopt;
    pending_.append(chunk, static_cast<std::size_t>(n));
  }
}

TempDir::TempDir(const std::string& base) {
  std::filesystem::path parent =
      base.empty() ? std::filesystem::temp_directory_path() : std::filesystem::path(base);
  std::string pattern = (parent / "rdmakit-metadata-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

std::uint16_t free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  socklen_t length = sizeof(address);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  ::close(fd);
  return ntohs(address.sin_port);
}

MetadataOptions test_options(const std::string& backend, const std::string& name_space) {
  MetadataOptions options;
  options.name_space = name_space;
  // etcd counts whole seconds; its short heartbeats (EtcdServer) allow a 1 s lease.
  options.ttl = std::chrono::milliseconds(1000);
  (void)backend;
  options.renew_interval = std::chrono::milliseconds(200);
  options.timeout = std::chrono::milliseconds(2000);
  return options;
}

namespace {

// Waits until a store opens at `url` (the server is up and answers its protocol).
void wait_until_serving(const std::string& url, const std::string& log) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  MetadataOptions options;
  options.timeout = std::chrono::milliseconds(500);
  options.ttl = std::chrono::milliseconds(2000);
  options.renew_interval = std::chrono::milliseconds(1000);
  std::string last;
  while (std::chrono::steady_clock::now() < deadline) {
    auto store = open_metadata(url, options);
    if (store && (*store)->list()) return;
    last = store ? "list failed" : store.error().message();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  throw std::runtime_error("the server at " + url + " did not come up within 20 s (" + last +
                           "); its log: " + log);
}

class BuiltinServer final : public Server {
 public:
  BuiltinServer() : port_(free_port()) { start(); }
  std::string url() const override { return "builtin://127.0.0.1:" + std::to_string(port_); }
  void stop() override { server_.reset(); }
  void start() override {
    auto server = serve_builtin_metadata("127.0.0.1:" + std::to_string(port_));
    if (!server) throw std::runtime_error(server.error().message());
    server_ = std::move(*server);
  }

 private:
  std::uint16_t port_;
  std::unique_ptr<MetadataServer> server_;
};

class RedisServer final : public Server {
 public:
  RedisServer() : port_(free_port()) { start(); }
  std::string url() const override { return "redis://127.0.0.1:" + std::to_string(port_); }
  void stop() override { process_.reset(); }
  void start() override {
    // No persistence: a restart comes back empty, as a crashed cache server would.
    process_.emplace(Process::spawn(
        {"/usr/bin/redis-server", "--port", std::to_string(port_), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", dir_.path(), "--loglevel", "warning", "--protected-mode", "no"},
        log()));
    wait_until_serving(url(), log());
  }

 private:
  std::string log() const { return dir_.path() + "/redis.log"; }
  TempDir dir_;
  std::uint16_t port_;
  std::optional<Process> process_;
};

class EtcdServer final : public Server {
 public:
  EtcdServer() : port_(free_port()), peer_port_(free_port()) { start(); }
  std::string url() const override { return "etcd://127.0.0.1:" + std::to_string(port_); }
  void stop() override { process_.reset(); }
  void start() override {
    // A fresh data directory each start: the restarted server has lost every key and lease.
    std::string data = dir_.path() + "/data";
    std::filesystem::remove_all(data);
    std::string client = "http://127.0.0.1:" + std::to_string(port_);
    std::string peer = "http://127.0.0.1:" + std::to_string(peer_port_);
    // Short heartbeats: the leader is elected fast, and the minimum lease TTL is 1 s.
    process_.emplace(Process::spawn({"/usr/bin/etcd",
                                     "--name",
                                     "test",
                                     "--data-dir",
                                     data,
                                     "--listen-client-urls",
                                     client,
                                     "--advertise-client-urls",
                                     client,
                                     "--listen-peer-urls",
                                     peer,
                                     "--initial-advertise-peer-urls",
                                     peer,
                                     "--initial-cluster",
                                     "test=" + peer,
                                     "--heartbeat-interval",
                                     "10",
                                     "--election-timeout",
                                     "100",
                                     "--log-level",
                                     "error"},
                                    log()));
    wait_until_serving(url(), log());
  }

 private:
  std::string log() const { return dir_.path() + "/etcd.log"; }
  // In memory where there is /dev/shm: etcd fsyncs every commit, and a loaded CI disk must not turn a
  // renewal into a timeout (the test fails on the warning that would log).
  TempDir dir_{std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : ""};
  std::uint16_t port_;
  std::uint16_t peer_port_;
  std::optional<Process> process_;
};

}  // namespace

std::unique_ptr<Server> make_server(const std::string& backend, std::string& why) {
  if (backend == "builtin") return std::make_unique<BuiltinServer>();
  std::string program = backend == "redis" ? "/usr/bin/redis-server" : "/usr/bin/etcd";
  if (::access(program.c_str(), X_OK) != 0) {
    why = program + " is not installed (Debian package " +
          std::string(backend == "redis" ? "redis-server" : "etcd-server") +
          "; scripts/setup.sh installs it)";
    return nullptr;
  }
  if (backend == "redis") return std::make_unique<RedisServer>();
  return std::make_unique<EtcdServer>();
}

}  // namespace rdmakit::xfer::testing
