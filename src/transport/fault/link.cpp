#include "transport/fault/link.hpp"

#include <string>
#include <vector>

namespace rdmakit::fault {

Link::Link(std::shared_ptr<Connection> inner, Injector& injector, std::chrono::milliseconds timeout,
           std::uint64_t first_synthetic_id)
    : inner_(std::move(inner)), injector_(injector), timeout_(timeout), number_(inner_->number()),
      next_id_(first_synthetic_id) {}

Result<std::uint64_t> Link::post(std::span<const WorkRequest> chain) {
  std::unique_lock lock(mutex_);
  if (broken_) return std::unexpected(*broken_);
  if (chain.empty()) return inner_->post(chain);  // let the inner transport name the problem
  // Which request, if any, dooms the connection; delays for the ones before it.
  std::size_t cut = chain.size();
  std::optional<Rule> doom;
  std::vector<std::chrono::milliseconds> delays(chain.size());
  if (doomed_) cut = 0;
  for (std::size_t i = 0; i < cut; ++i) {
    auto rule = injector_.match(chain[i].opcode, number_);
    if (!rule) continue;
    if (rule->action == Rule::Action::Delay) {
      delays[i] = rule->delay;
    } else {
      doom = rule;
      cut = i;
    }
  }
  Result<std::uint64_t> first = next_id_;
  if (cut > 0 && !forward(chain.first(cut), std::span(delays).first(cut), first)) return first;
  const auto now = Clock::now();
  bool sever_now = false;
  for (std::size_t i = cut; i < chain.size(); ++i) {
    if (i != cut || !doom) {
      add_synthetic(chain[i], Status::Flushed, now, false);
    } else if (doom->action == Rule::Action::Fail) {
      add_synthetic(chain[i], doom->status, now, true);
    } else if (doom->action == Rule::Action::Drop) {
      // The request never reaches the peer: the silent-peer rule fails it after Config::timeout.
      add_synthetic(chain[i], Status::TransportRetryExceeded, now + timeout_, true);
    } else {
      add_synthetic(chain[i], Status::Flushed, now, false);
      sever_now = true;
    }
  }
  if (doom) doomed_ = true;
  if (sever_now) {
    break_locked("fault: injected disconnect at " + std::string(to_string(chain[cut].opcode)));
    lock.unlock();
    inner_->close();
  }
  return first;
}

// Posts the requests that go through, all signaled inside so that the link learns when each one is done
// (a synthetic failure behind them must wait for that); successes the user did not ask for are dropped.
bool Link::forward(std::span<const WorkRequest> chain, std::span<const std::chrono::milliseconds> delays,
                   Result<std::uint64_t>& first) {
  std::vector<WorkRequest> copy(chain.begin(), chain.end());
  for (auto& request : copy) request.signaled = true;
  first = inner_->post(copy);
  if (!first) return false;
  for (std::size_t i = 0; i < chain.size(); ++i)
    queue_.push_back(Pending{.id = *first + i, .signaled = chain[i].signaled, .delay = delays[i]});
  next_id_ = *first + chain.size();
  return true;
}

void Link::add_synthetic(const WorkRequest& request, Status status, Clock::time_point release, bool dooms) {
  Completion completion{.id = next_id_++, .status = status, .opcode = request.opcode, .connection = number_};
  queue_.push_back(Pending{.id = completion.id, .signaled = request.signaled, .known = true, .synthetic = true, .dooms = dooms,
                           .release = release, .completion = completion});
  ++synthetic_posted_;
}

Result<std::uint64_t> Link::post_recv(std::span<const Segment> sgl) {
  {
    std::lock_guard lock(mutex_);
    if (broken_) return std::unexpected(*broken_);
  }
  // A receive posted while a failure is queued reaches the inner connection, whose closing flushes it.
  return inner_->post_recv(sgl);
}

void Link::break_locked(std::string why) {
  if (!broken_) broken_ = Error(Errc::ConnectionBroken, std::move(why));
  doomed_ = true;
}

void Link::sever(std::string why) {
  {
    std::lock_guard lock(mutex_);
    break_locked(std::move(why));
  }
  inner_->close();
}

void Link::close() {
  {
    std::lock_guard lock(mutex_);
    if (closed_) return;
    closed_ = true;
    break_locked("connection closed");
    const auto now = Clock::now();
    for (Pending& pending : queue_) {
      pending.release = std::min(pending.release, now);
      if (pending.dooms) {  // a queued injected failure never happened: the close came first
        pending.dooms = false;
        pending.completion.status = Status::Flushed;
      }
    }
  }
  inner_->close();  // flushes what was forwarded
}

bool Link::on_completion(const Completion& completion) {
  std::lock_guard lock(mutex_);
  for (Pending& pending : queue_) {
    if (pending.id != completion.id || pending.known) continue;
    pending.known = true;
    pending.completion = completion;
    pending.release = closed_ ? Clock::now() : Clock::now() + pending.delay;
    return true;
  }
  return false;
}

void Link::drain(Clock::time_point now, CompletionSink& sink) {
  bool close_inner = false;
  {
    std::lock_guard lock(mutex_);
    while (!queue_.empty() && queue_.front().known && queue_.front().release <= now) {
      Pending pending = queue_.front();
      queue_.pop_front();
      if (pending.signaled || !pending.completion.ok()) sink.emit(pending.completion);
      if (pending.synthetic) ++synthetic_completed_;
      if (pending.dooms) {
        break_locked("fault: injected " + std::string(to_string(pending.completion.status)) + " on " +
                     std::string(to_string(pending.completion.opcode)) + " " + std::to_string(pending.id));
        close_inner = true;
      }
    }
  }
  if (close_inner) inner_->close();  // flushes the receives, as the error state of a QP does
}

std::optional<Link::Clock::time_point> Link::next_release() const {
  std::lock_guard lock(mutex_);
  if (queue_.empty() || !queue_.front().known) return std::nullopt;
  return queue_.front().release;
}

bool Link::finished() const {
  std::lock_guard lock(mutex_);
  return closed_ && queue_.empty();
}

ConnectionStats Link::stats() const {
  ConnectionStats stats = inner_->stats();
  std::lock_guard lock(mutex_);
  stats.posted += synthetic_posted_;
  stats.completed += synthetic_completed_;
  stats.outstanding = stats.posted - std::min(stats.posted, stats.completed);
  if (broken_) {
    stats.failed = true;
    stats.failure = broken_->message();
  }
  return stats;
}

Result<void> Link::health() const {
  {
    std::lock_guard lock(mutex_);
    if (broken_) return std::unexpected(*broken_);
  }
  return inner_->health();
}

}  // namespace rdmakit::fault
