// The engine's data path: checking a batch, posting its work requests under the in-flight bounds, and
// turning completions into per-request statuses (or into retries after a re-resolve).
#include <algorithm>
#include <array>

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
    op->link = &link;
    auto first = segments.size();
    for (const auto& piece : op->op.local) {
      auto region = std::ranges::find(op->regions, piece.region, [](const auto& r) { return r->id; });
      segments.push_back(Segment{piece.addr, piece.length, (*region)->by_rail[link.rail->index]->lkey()});
    }
    wrs.push_back(WorkRequest{.opcode = op->op.write ? Opcode::Write : Opcode::Read,
                              .local = std::span<const Segment>(segments.data() + first, op->op.local.size()),
                              .remote = op->entry->remote[link.remote_rail].at(op->op.offset)});
  }
  work_requests_.fetch_add(chain.size(), std::memory_order_relaxed);
  auto first = link.connection->post(wrs);
  if (!first) {
    auto n = static_cast<std::uint32_t>(chain.size());
    link.rail->credits->release(n);
    chain.front()->entry->peer->credits.release(n);
    for (auto& op : chain) complete(std::move(op), &first.error(), transient(first.error().code()));
    return;
  }
  std::vector<std::pair<std::unique_ptr<InflightOp>, Completion>> early;
  {
    std::lock_guard lock(link.rail->ops_mutex);
    for (std::size_t k = 0; k < chain.size(); ++k) {
      auto id = *first + k;
      if (auto it = link.rail->early.find(id); it != link.rail->early.end()) {
        early.emplace_back(std::move(chain[k]), it->second);
        link.rail->early.erase(it);
      } else {
        link.rail->ops.emplace(id, std::move(chain[k]));
      }
    }
  }
  for (auto& [op, completion] : early) {
    link.rail->ops_mutex.lock();
    link.rail->ops.emplace(completion.id, std::move(op));
    link.rail->ops_mutex.unlock();
    on_completion(*link.rail, completion);
  }
}

void EngineImpl::progress_loop(Rail& rail) {
  std::array<Completion, 64> completions;
  auto drain_deadline = Clock::time_point::max();
  while (true) {
    if (stop_.load(std::memory_order_acquire)) {
      if (drain_deadline == Clock::time_point::max()) drain_deadline = Clock::now() + options_.peer_timeout;
      std::lock_guard lock(rail.ops_mutex);
      if (rail.ops.empty() || Clock::now() > drain_deadline) return;
    }
    auto n = rail.cq->wait(completions, std::chrono::milliseconds(20));
    if (!n) continue;
    for (std::size_t i = 0; i < *n; ++i) on_completion(rail, completions[i]);
  }
}

bool EngineImpl::poll_rails() {
  std::array<Completion, 32> completions;
  bool found = false;
  for (auto& rail : rails_) {
    auto n = rail->cq->poll(completions);
    for (std::size_t i = 0; i < n; ++i) on_completion(*rail, completions[i]);
    found |= n != 0;
  }
  return found;
}

void EngineImpl::on_completion(Rail& rail, const Completion& completion) {
  std::unique_ptr<InflightOp> op;
  {
    std::lock_guard lock(rail.ops_mutex);
    auto it = rail.ops.find(completion.id);
    if (it == rail.ops.end()) {
      rail.early.emplace(completion.id, completion);  // post() has not returned to post_chain yet
      return;
    }
    op = std::move(it->second);
    rail.ops.erase(it);
  }
  rail.credits->release(1);
  op->entry->peer->credits.release(1);
  if (completion.ok()) return complete(std::move(op), nullptr, false);
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
                              "segment '" + current->name + "' is gone (unpublished, or its owner died)"));
  }
  if (op->op.offset + op->op.length > current->record.length) {
    return fail_op(*op,
                   Error(Errc::InvalidArgument, "segment '" + current->name + "' shrank below the request"));
  }
  op->entry = current;
  std::vector<std::unique_ptr<InflightOp>> again;
  again.push_back(std::move(op));
  post_all(std::move(again), Clock::now() + options_.submit_timeout);
}

}  // namespace rdmakit::xfer::detail
