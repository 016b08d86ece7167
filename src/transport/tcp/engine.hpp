// The tcp transport's progress engine: one thread per context that waits on every connection's socket
// with epoll and carries out what arrives (the target's side of one-sided operations, responses,
// receives), and checks the silent-peer and receiver-not-ready deadlines on a periodic tick.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/fd.hpp"
#include "rdmakit/error.hpp"

namespace rdmakit::tcp {

// What the engine drives. Implemented by TcpConnection.
class Pollable {
 public:
  virtual ~Pollable() = default;
  // Reads what arrived. A connection reads a bounded amount per call so that one flooding peer cannot keep
  // the engine from the others; it returns true when input is left, and the engine calls again next round.
  virtual bool on_readable() = 0;
  virtual void on_writable() = 0;
  virtual void on_tick(std::int64_t now_ns) = 0;
  // A polling lease may have run out (see Engine::lease_until): take input back if so.
  virtual void on_lease_check(std::int64_t now_ns) = 0;
};

class Engine {
 public:
  static Result<std::unique_ptr<Engine>> start();
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // A key for add(), never given out before in this engine's life (64 bits: they do not wrap, so a key can
  // never name two watched sockets).
  std::uint64_t new_key() noexcept { return next_key_.fetch_add(1, std::memory_order_relaxed); }
  // Watches fd for input (and output when asked) on behalf of `target`, known by `key`.
  Result<void> add(std::uint64_t key, int fd, std::weak_ptr<Pollable> target);
  void remove(std::uint64_t key, int fd);
  // Turns interest in input / output on or off (epoll_ctl is safe while the thread waits).
  void set_interest(std::uint64_t key, int fd, bool input, bool output);
  // Makes the engine call target->on_readable() soon even without new input (a receive was posted
  // for a frame that waits for one).
  void kick(std::uint64_t key);
  bool on_engine_thread() const noexcept { return std::this_thread::get_id() == thread_.get_id(); }
  // A connection stopped watching its input because a thread polls it, until `until_ns`: the engine wakes
  // by then (instead of its 20 ms tick) to call on_lease_check() on every connection.
  void lease_until(std::int64_t until_ns) noexcept;
  // Every connection the engine watches, alive at the time of the call.
  std::vector<std::shared_ptr<Pollable>> watched() const;

 private:
  Engine(Fd epoll, Fd wake);
  void run();
  void run_kicked(std::vector<std::uint64_t>& again);
  void read_from(std::uint64_t key, std::vector<std::uint64_t>& again);
  int wait_ms(std::int64_t next_tick, bool busy) const noexcept;
  void check_leases(std::int64_t now);
  std::shared_ptr<Pollable> find(std::uint64_t key) const;

  Fd epoll_;
  Fd wake_;  // eventfd that ends run()
  mutable std::mutex mutex_;
  std::unordered_map<std::uint64_t, std::weak_ptr<Pollable>> targets_;
  std::vector<std::uint64_t> kicked_;  // guarded by mutex_
  std::atomic<std::uint64_t> next_key_{1};
  std::atomic<bool> stopping_{false};
  std::atomic<std::int64_t> lease_check_ns_{0};  // 0: no lease to check
  std::thread thread_;  // last: started after everything it uses exists, joined first
};

}  // namespace rdmakit::tcp
