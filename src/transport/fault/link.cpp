#include "transport/fault/link.hpp"

#include <string>
#include <vector>

#include "transport/fault/rule_book.hpp"

namespace rdmakit::fault {

Link::Link(std::shared_ptr<Connection> inner, std::shared_ptr<detail::RcState> state, Injector& injector,
           std::chrono::milliseconds timeout)
    : inner_(std::move(inner)),
      state_(std::move(state)),
      injector_(injector),
      timeout_(timeout),
      number_(inner_->number()),
      next_id_(state_->send_id(0)) {}

Result<std::uint64_t> Link::post(std::span<const WorkRequest> chain) {
  // Checked by the prologue against this connection's state, so requests behind an injected failure never
  // reach the inner connection. A full queue is the inner connection's to find; behind a failure the chain
  // queues up here (below) and flushes in order, after what was posted before it.
  std::unique_lock lock(mutex_);
  // Which request, if any, dooms the connection; delays for the ones before it.
  std::size_t cut = chain.size();
  std::optional<Rule> doom;
  std::vector<std::chrono::milliseconds> delays(chain.size());
  if (state_->failure_queued()) cut = 0;
  for (std::size_t i = 0; i < cut; ++i) {
    auto rule = detail::FaultRuleBook::of(injector_).match(chain[i].opcode, number_);
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
  if (doom) state_->queue_failure();
  if (sever_now) {
    inner_closed_ = true;
    break_locked(Error(Errc::ConnectionBroken,
                       "fault: injected disconnect at " + std::string(to_string(chain[cut].opcode))));
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
  state_->issued(next_id_ - 1);
  return true;
}

void Link::add_synthetic(const WorkRequest& request, Status status, Clock::time_point release, bool dooms) {
  Completion completion{.id = next_id_++, .status = status, .opcode = request.opcode, .connection = number_};
  queue_.push_back(Pending{.id = completion.id,
                           .signaled = request.signaled,
                           .known = true,
                           .synthetic = true,
                           .dooms = dooms,
                           .release = release,
                           .completion = completion});
  state_->issued(completion.id);
}

Result<std::uint64_t> Link::post_recv(std::span<const Segment> sgl, std::optional<Completion>& flushed) {
  std::unique_lock lock(mutex_);
  // The inner connection is gone, as a QP in the error state would keep taking receives and flush them.
  if (inner_closed_) return state_->post_recv_flushed([&](const Completion& c) { flushed = c; });
  lock.unlock();
  // A receive posted while a failure is queued reaches the inner connection, whose closing flushes it.
  auto id = inner_->post_recv(sgl);
  if (id) state_->issued(*id);
  return id;
}

void Link::break_locked(Error why) {
  state_->fail(std::move(why));  // the first failure stays; failure_queued() from now on
}

void Link::sever(std::string why) {
  {
    std::lock_guard lock(mutex_);
    break_locked(Error(Errc::ConnectionBroken, std::move(why)));
    inner_closed_ = true;
  }
  inner_->close();
}

void Link::close() {
  {
    std::lock_guard lock(mutex_);
    if (!state_->close()) return;
    break_locked(
        Error(Errc::ConnectionBroken, "connection " + std::to_string(number_) + " was closed by this side"));
    inner_closed_ = true;
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
    pending.release = state_->closed() ? Clock::now() : Clock::now() + pending.delay;
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
      state_->completed(pending.completion);  // done, and queued below if it has a completion
      if (pending.dooms) {
        // Recorded before the completion can be taken, so health() agrees with what was polled.
        break_locked(detail::completion_error(pending.completion, "injected by the fault transport"));
        inner_closed_ = true;
        close_inner = true;
      }
      if (pending.signaled || !pending.completion.ok()) sink.emit(pending.completion);
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
  return state_->closed() && queue_.empty();
}

// The core's counters: this state saw every id issued (forwarded and synthetic) and every completion. The
// inner connection adds what only it knows (its transport's counters) and a failure this state has not.
ConnectionStats Link::stats() const {
  ConnectionStats inner = inner_->stats();
  ConnectionStats stats = state_->stats(inner_->peer());
  stats.transport_counters = std::move(inner.transport_counters);
  if (!stats.failed) {
    stats.failed = inner.failed;
    stats.failure = inner.failure;
  }
  return stats;
}

Result<void> Link::health() const {
  if (state_->failed()) return state_->health();
  return inner_->health();
}

}  // namespace rdmakit::fault
