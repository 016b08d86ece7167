// The engine's data path: checking a batch, posting its work requests under the in-flight bounds, and
// turning completions into per-request statuses (or into retries after a re-resolve).
#include <algorithm>
#include <array>
#include <thread>

#include "xfer/engine/engine_impl.hpp"

namespace rdmakit::xfer::detail {
namespace {

using Clock = std::chrono::steady_clock;

std::string request_name(std::size_t i) { return "request " + std::to_string(i); }

// Failures after which a re-resolve and a new connection may succeed: the connection or the peer's life
// ended, or the descriptor belongs to an earlier life of the owner.
bool transient(Status status) {
  switch (status) {
    case Status::LocalLength:
    case Status::LocalProtection:
    case Status::RemoteInvalidRequest:
      return false;
    default:
      return true;
  }
}

bool transient(Errc code) { return code == Errc::StaleDescriptor || code == Errc::ConnectionBroken; }

}  // namespace

Result<std::vector<PlanItem>> EngineImpl::check(std::span<const Request> requests,
                                                std::vector<std::shared_ptr<const SegmentEntry>>& entries,
                                                std::vector<std::shared_ptr<LocalRegion>>& regions) const {
  std::vector<PlanItem> items;
  items.reserve(requests.size());
  entries.assign(requests.size(), nullptr);
  std::shared_ptr<const SegmentEntry> last;
  std::uint32_t last_handle = 0;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const auto& r = requests[i];
    if (!last || r.segment.value != last_handle) {
      last = entry(r.segment.value);
      last_handle = r.segment.value;
    }
    if (!last)
      return fail(Errc::InvalidArgument,
                  request_name(i) + ": no segment handle " + std::to_string(r.segment.value));
    if (last->gone) return fail(Errc::NotFound, request_name(i) + ": segment '" + last->name + "' is gone");
    if (r.length == 0) return fail(Errc::InvalidArgument, request_name(i) + ": length is 0");
    if (r.offset > last->record.length || r.length > last->record.length - r.offset) {
      return fail(Errc::InvalidArgument, request_name(i) + ": offset " + std::to_string(r.offset) +
                                             " + length " + std::to_string(r.length) +
                                             " is outside segment '" + last->name + "' (" +
                                             std::to_string(last->record.length) + " bytes)");
    }
    auto address = reinterpret_cast<std::uint64_t>(r.local);
    auto known = std::ranges::find_if(regions, [&](const auto& region) {
      return address >= region->addr && r.length <= region->size &&
             address - region->addr <= region->size - r.length;
    });
    auto local = known != regions.end() ? *known : find_local(address, r.length);
    if (local && known == regions.end()) regions.push_back(local);
    if (!local) {
      return fail(Errc::InvalidArgument, request_name(i) + ": local memory of " + std::to_string(r.length) +
                                             " bytes is not inside memory registered with the engine");
    }
    if (!local->reaches(last->transport)) {
      return fail(Errc::NotSupported, request_name(i) + ": segment '" + last->name + "' is reached over " +
                                          last->transport + ", which did not register the local memory (" +
                                          local->refusals + ")");
    }
    entries[i] = last;
    items.push_back(PlanItem{static_cast<std::uint32_t>(i), r.segment.value, r.op == Op::Write, local->id,
                             reinterpret_cast<std::uint64_t>(r.local), r.offset, r.length});
  }
  return items;
}

Result<std::shared_ptr<Batch>> EngineImpl::submit(std::span<const Request> requests, BatchCallback done) {
  std::vector<std::shared_ptr<const SegmentEntry>> entries;
  std::vector<std::shared_ptr<LocalRegion>> regions;
  auto items = check(requests, entries, regions);
  if (!items) return std::unexpected(items.error());
  auto batch = std::make_shared<BatchImpl>(requests.size(), std::move(done));
  batch->set_self(batch);
  batch->set_progress([handle = progress_handle_] {
    std::shared_lock lock(handle->mutex);
    return handle->engine != nullptr && handle->engine->poll_rails();
  });
  requests_.fetch_add(requests.size(), std::memory_order_relaxed);
  if (requests.empty()) return batch;

  PlanLimits limits{options_.stripe_bytes, options_.coalesce_bytes, UINT32_MAX, UINT64_MAX};
  for (const auto& rail : rails_) {
    limits.max_sge = std::min(limits.max_sge, std::max<std::uint32_t>(1, rail->caps.max_sge));
    if (rail->caps.max_message_size != 0)
      limits.max_message = std::min(limits.max_message, rail->caps.max_message_size);
  }
  auto planned = plan(*items, limits);
  std::vector<std::uint32_t> pieces(requests.size(), 0);
  std::vector<std::unique_ptr<InflightOp>> ops;
  ops.reserve(planned.size());
  for (auto& p : planned) {
    auto op = std::make_unique<InflightOp>();
    op->batch = batch;
    op->handle = p.segment;
    op->entry = entries[p.requests.front()];
    for (auto r : p.requests) ++pieces[r];
    if (p.requests.size() > 1) coalesced_.fetch_add(p.requests.size(), std::memory_order_relaxed);
    for (const auto& piece : p.local) {
      if (std::ranges::find(op->regions, piece.region, [](const auto& r) { return r->id; }) !=
          op->regions.end())
        continue;
      op->regions.push_back(*std::ranges::find(regions, piece.region, [](const auto& r) { return r->id; }));
    }
    op->op = std::move(p);
    ops.push_back(std::move(op));
  }
  for (std::size_t i = 0; i < pieces.size(); ++i) batch->expect(i, pieces[i]);
  post_all(std::move(ops), Clock::now() + options_.submit_timeout);
  return batch;
}

void EngineImpl::post_all(std::vector<std::unique_ptr<InflightOp>> ops, Clock::time_point deadline) {
  std::ranges::stable_sort(ops, {}, [](const auto& op) { return op->entry->peer.get(); });
  std::size_t next = 0;
  while (next < ops.size()) {
    auto* peer = ops[next]->entry->peer.get();
    auto end = next;
    while (end < ops.size() && ops[end]->entry->peer.get() == peer) ++end;
    std::vector<std::unique_ptr<InflightOp>> group(std::make_move_iterator(ops.begin() + next),
                                                   std::make_move_iterator(ops.begin() + end));
    std::size_t posted = 0;
    while (posted < group.size()) post_round(*peer, group, posted, deadline);
    next = end;
  }
}

// Posts the next few work requests of `ops` (all to `peer`) as one chain on the peer's next link, once the
// bounds allow; spreading rounds over the links stripes a long request over every connection and device.
void EngineImpl::post_round(Peer& peer, std::vector<std::unique_ptr<InflightOp>>& ops, std::size_t& next,
                            Clock::time_point deadline) {
  auto links = static_cast<std::uint32_t>(peer.links.size());
  auto left = static_cast<std::uint32_t>(ops.size() - next);
  auto wanted = std::clamp<std::uint32_t>(left / links, 1, 32);
  auto& link = *peer.links[peer.next_link.fetch_add(1, std::memory_order_relaxed) % links];
  auto granted = peer.credits.acquire(wanted, deadline);
  auto rail_granted = granted == 0 ? 0 : link.rail->credits->acquire(granted, deadline);
  if (rail_granted < granted) peer.credits.release(granted - rail_granted);
  if (rail_granted > 0 && link.rail->progress_sleeping.load()) {
    std::lock_guard lock(link.rail->idle_mutex);  // it is in its wait, or sees the credit before it waits
    link.rail->work_posted.notify_one();
  }
  if (rail_granted == 0) {
    Error busy(Errc::ResourceExhausted, "busy: " + std::to_string(left) + " work requests to '" + peer.owner +
                                            "' could not be posted within "
                                            "submit_timeout (max_inflight_per_peer " +
                                            std::to_string(options_.max_inflight_per_peer) +
                                            ", max_inflight_per_rail " +
                                            std::to_string(options_.max_inflight_per_rail) + ")");
    for (; next < ops.size(); ++next) fail_op(*ops[next], busy);
    return;
  }
  std::vector<std::unique_ptr<InflightOp>> chain(std::make_move_iterator(ops.begin() + next),
                                                 std::make_move_iterator(ops.begin() + next + rail_granted));
  next += rail_granted;
  post_chain(link, std::move(chain));
}

void EngineImpl::post_chain(Link& link, std::vector<std::unique_ptr<InflightOp>> chain) {
  std::size_t sges = 0;
  for (const auto& op : chain) sges += op->op.local.size();
  std::vector<Segment> segments;
  segments.reserve(sges);
  std::vector<WorkRequest> wrs;
  wrs.reserve(chain.size());
  for (auto& op : chain) {
    auto first = segments.size();
    for (const auto& piece : op->op.local) {
      auto region = std::ranges::find(op->regions, piece.region, [](const auto& r) { return r->id; });
      segments.push_back(Segment{piece.addr, piece.length, (*region)->by_rail[link.rail->index]->lkey()});
    }
    wrs.push_back(WorkRequest{.opcode = op->op.write ? Opcode::Write : Opcode::Read,
                              .local = std::span<const Segment>(segments.data() + first, op->op.local.size()),
                              .remote = op->entry->remote[link.remote_rail].at(op->op.offset),
                              .signaled = wrs.size() + 1 == chain.size()});
  }
  work_requests_.fetch_add(chain.size(), std::memory_order_relaxed);
  link.rail->work_requests.fetch_add(chain.size(), std::memory_order_relaxed);
  auto first = link.connection->post(wrs);
  if (!first) {
    auto n = static_cast<std::uint32_t>(chain.size());
    link.rail->credits->release(n);
    chain.front()->entry->peer->credits.release(n);
    for (auto& op : chain) complete(std::move(op), &first.error(), transient(first.error().code()));
    return;
  }
  // Completions a reaper (the progress thread or a waiter) took before this chain was known wait in `early`:
  // they are applied
  // here, in id order (their queue order), in the same critical section that makes the chain known, so no
  // later completion of the chain can be applied before them.
  Rail& rail = *link.rail;
  std::vector<std::pair<Finished, Completion>> ready;
  {
    std::lock_guard lock(rail.ops_mutex);
    const std::uint64_t last = *first + chain.size() - 1;
    auto it = rail.chains.emplace(last, InflightChain{*first, 0, std::move(chain)}).first;
    for (auto e = rail.early.lower_bound(*first); e != rail.early.end() && e->first <= last;) {
      auto& [finished, completion] = ready.emplace_back(Finished{}, e->second);
      e = rail.early.erase(e);
      if (advance_locked(rail, it, completion, finished)) break;
    }
  }
  for (auto& [finished, completion] : ready) finish(rail, std::move(finished), completion);
}

// While work is in flight the thread reaps, yielding between empty polls and then napping (a waiter
// usually reaps its own batch; a wake-up per completion would cost more than the bytes on shm, where they
// move within the post); with nothing in flight it sleeps until a post takes a credit.
void EngineImpl::progress_loop(Rail& rail) {
  // Empty polls before napping or sleeping: back-to-back batches find the thread still awake, instead of
  // paying a wake-up each (the idle sleep is entered only after this many empty polls, too).
  constexpr std::uint32_t kLingerPolls = 64;
  auto drain_deadline = Clock::time_point::max();
  std::uint32_t empty_polls = 0;
  while (true) {
    if (stop_.load(std::memory_order_acquire)) {
      if (drain_deadline == Clock::time_point::max()) drain_deadline = Clock::now() + options_.peer_timeout;
      std::lock_guard lock(rail.ops_mutex);
      if (rail.chains.empty() || Clock::now() > drain_deadline) return;
    } else if (rail.credits->in_use() == 0 && empty_polls >= kLingerPolls) {
      std::unique_lock lock(rail.idle_mutex);
      rail.progress_sleeping.store(true);
      rail.work_posted.wait_for(lock, std::chrono::milliseconds(20),
                                [&] { return rail.credits->in_use() > 0 || stop_.load(); });
      rail.progress_sleeping.store(false);
      continue;
    }
    if (reap(rail)) {
      empty_polls = 0;
    } else if (++empty_polls < kLingerPolls) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

bool EngineImpl::reap(Rail& rail) {
  std::unique_lock lock(rail.reap_mutex, std::try_to_lock);
  if (!lock) return false;
  std::array<Completion, 64> completions;
  auto n = rail.cq->poll(completions);
  for (std::size_t i = 0; i < n; ++i) on_completion(rail, completions[i]);
  return n != 0;
}

bool EngineImpl::poll_rails() {
  bool found = false;
  for (auto& rail : rails_) found |= reap(*rail);
  return found;
}

// In the queue's order (one reaper at a time): the chain's work requests before the completing one finished
// without a completion of their own, so they succeeded (a failure among them would have completed first,
// and this one would be Flushed).
bool EngineImpl::advance_locked(Rail& rail, std::map<std::uint64_t, InflightChain>::iterator it,
                                const Completion& completion, Finished& finished) {
  auto& chain = it->second;
  const auto k = static_cast<std::size_t>(completion.id - chain.first);
  if (k < chain.done) return false;  // not expected: a work request completes once
  for (auto j = chain.done; j < k; ++j) finished.ok.push_back(std::move(chain.ops[j]));
  if (completion.ok())
    finished.ok.push_back(std::move(chain.ops[k]));
  else
    finished.failed = std::move(chain.ops[k]);
  chain.done = k + 1;
  if (chain.done < chain.ops.size()) return false;
  rail.chains.erase(it);
  return true;
}

void EngineImpl::on_completion(Rail& rail, const Completion& completion) {
  Finished finished;
  {
    std::lock_guard lock(rail.ops_mutex);
    auto it = rail.chains.lower_bound(completion.id);
    if (it == rail.chains.end() || completion.id < it->second.first) {
      rail.early.emplace(completion.id, completion);  // post() has not returned to post_chain yet
      return;
    }
    advance_locked(rail, it, completion, finished);
  }
  finish(rail, std::move(finished), completion);
}

void EngineImpl::finish(Rail& rail, Finished finished, const Completion& completion) {
  if (finished.count() == 0) return;
  auto n = static_cast<std::uint32_t>(finished.count());
  rail.credits->release(n);
  (finished.failed ? finished.failed : finished.ok.front())->entry->peer->credits.release(n);
  for (auto& op : finished.ok) complete(std::move(op), nullptr, false);
  if (!finished.failed) return;
  auto& op = finished.failed;
  Error error(Errc::TransportFailure,
              std::string(op->op.write ? "WRITE" : "READ") + " of " + std::to_string(op->op.length) +
                  " bytes at " + std::to_string(op->op.offset) + " of segment '" + op->entry->name +
                  "' (owner '" + op->entry->record.owner + "'): " + std::string(to_string(completion.status)),
              0, completion.status);
  complete(std::move(op), &error, transient(completion.status));
}

void EngineImpl::complete(std::unique_ptr<InflightOp> op, const Error* error, bool retryable) {
  if (error == nullptr) {
    for (auto r : op->op.requests) op->batch->piece_done(r, nullptr);
    return;
  }
  if (!retryable || op->attempts >= options_.max_retries || stop_.load(std::memory_order_acquire)) {
    return fail_op(*op, *error);
  }
  {
    std::lock_guard lock(retry_mutex_);
    retry_queue_.push_back(std::move(op));
  }
  retry_ready_.notify_one();
}

void EngineImpl::fail_op(InflightOp& op, const Error& error) {
  for (auto r : op.op.requests) op.batch->piece_done(r, &error);
}

void EngineImpl::retry_loop() {
  while (true) {
    std::unique_ptr<InflightOp> op;
    {
      std::unique_lock lock(retry_mutex_);
      retry_ready_.wait(lock, [&] { return stop_.load() || !retry_queue_.empty(); });
      if (retry_queue_.empty()) return;
      op = std::move(retry_queue_.front());
      retry_queue_.pop_front();
    }
    retry_one(std::move(op));
  }
}

// Re-resolves the op's segment unless another op already did since it was posted, then posts it again.
void EngineImpl::retry_one(std::unique_ptr<InflightOp> op) {
  if (stop_.load(std::memory_order_acquire)) {
    return fail_op(*op, Error(Errc::ConnectionBroken, "xfer engine closed before a retry"));
  }
  ++op->attempts;
  retries_.fetch_add(1, std::memory_order_relaxed);
  auto current = entry(op->handle);
  if (current->generation == op->entry->generation) {
    std::lock_guard lock(control_);
    current = entry(op->handle);
    if (current->generation == op->entry->generation) {
      auto fresh = resolve(current->name, next_generation_++, current.get());
      if (!fresh) return fail_op(*op, fresh.error());
      install(op->handle, *fresh);
      current = *fresh;
    }
  }
  if (current->gone) {
    return fail_op(*op, Error(Errc::NotFound,
                              "segment '" + current->name +
                                  "' is gone from the metadata (unpublished, or its owner's lease ran out: "
                                  "the owner died, is stopped or hung, or lost the metadata server)"));
  }
  if (op->op.offset + op->op.length > current->record.length) {
    return fail_op(*op,
                   Error(Errc::InvalidArgument, "segment '" + current->name + "' shrank below the request"));
  }
  // A re-resolve may pick another transport (the owner published anew): our memory must be on it too.
  for (const auto& region : op->regions) {
    if (!region->reaches(current->transport)) {
      return fail_op(*op, Error(Errc::NotSupported, "segment '" + current->name + "' is now reached over " +
                                                        current->transport +
                                                        ", which did not register the "
                                                        "local memory (" +
                                                        region->refusals + ")"));
    }
  }
  op->entry = current;
  std::vector<std::unique_ptr<InflightOp>> again;
  again.push_back(std::move(op));
  post_all(std::move(again), Clock::now() + options_.submit_timeout);
}

}  // namespace rdmakit::xfer::detail
