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

std::string describe_op(const InflightOp& op) {
  return std::string(op.op.write ? "WRITE" : "READ") + " of " + std::to_string(op.op.length) + " bytes at " +
         std::to_string(op.op.offset) + " of segment '" + op.entry->name + "' (owner '" +
         op.entry->record.owner + "')";
}

// Remembers the first failure of a work request that will be retried, and each retry's after it.
void note_error(InflightOp& op, const Error& error) {
  if (!op.first_error) {
    op.first_error = error;
    return;
  }
  if (!op.retry_errors.empty()) op.retry_errors += "; ";
  op.retry_errors += "retry " + std::to_string(op.attempts) + ": " + error.describe();
}

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
    if (last->record.file && local->kind != MemoryKind::Host) {
      return fail(Errc::NotSupported, request_name(i) + ": segment '" + last->name +
                                          "' is a file segment, and file segments deliver into host memory "
                                          "only in this version (the local memory is device memory)");
    }
    entries[i] = last;
    items.push_back(PlanItem{static_cast<std::uint32_t>(i), r.segment.value, r.op == Op::Write, local->id,
                             reinterpret_cast<std::uint64_t>(r.local), r.offset, r.length});
  }
  return items;
}

// Checks and plans once: what submit() does before it posts, kept for submitting again.
Result<std::shared_ptr<PreparedImpl>> EngineImpl::prepare_impl(std::span<const Request> requests) const {
  std::vector<std::shared_ptr<const SegmentEntry>> entries;
  auto prepared = std::make_shared<PreparedImpl>();
  auto items = check(requests, entries, prepared->regions);
  if (!items) return std::unexpected(items.error());
  prepared->engine = this;
  prepared->requests = requests.size();
  if (!requests.empty()) prepared->first_handle = requests.front().segment.value;
  for (const auto& r : requests) {
    auto it = std::ranges::find(prepared->handles, r.segment.value);
    if (it == prepared->handles.end()) {
      prepared->handles.push_back(r.segment.value);
      prepared->extents.push_back(0);
      it = prepared->handles.end() - 1;
    }
    auto& extent = prepared->extents[static_cast<std::size_t>(it - prepared->handles.begin())];
    extent = std::max(extent, r.offset + r.length);
  }
  // File segments' requests are not planned: the owner reads and delivers each (files.hpp).
  auto is_file = [&](const PlanItem& item) { return entries[item.request]->record.file; };
  for (const auto& item : *items) {
    if (!is_file(item)) continue;
    prepared->file_items.push_back(item);
    prepared->file_regions.push_back(
        *std::ranges::find(prepared->regions, item.region, [](const auto& r) { return r->id; }));
  }
  std::erase_if(*items, is_file);
  for (auto handle : prepared->handles) {
    auto it = std::ranges::find(requests, handle, [](const Request& r) { return r.segment.value; });
    prepared->handle_is_file.push_back(entries[static_cast<std::size_t>(it - requests.begin())]->record.file);
  }
  PlanLimits limits{options_.stripe_bytes, options_.coalesce_bytes, UINT32_MAX, UINT64_MAX};
  for (const auto& rail : rails_) {
    limits.max_sge = std::min(limits.max_sge, std::max<std::uint32_t>(1, rail->caps.max_sge));
    if (rail->caps.max_message_size != 0)
      limits.max_message = std::min(limits.max_message, rail->caps.max_message_size);
  }
  prepared->planned = plan(*items, limits);
  prepared->pieces.assign(requests.size(), 0);
  for (const auto& item : prepared->file_items)
    prepared->pieces[item.request] +=
        static_cast<std::uint32_t>((item.length + kFileMessageBytes - 1) / kFileMessageBytes);
  for (const auto& p : prepared->planned) {
    for (auto r : p.requests) ++prepared->pieces[r];
    if (p.requests.size() > 1) prepared->coalesced += p.requests.size();
    auto& mine = prepared->op_regions.emplace_back();
    for (const auto& piece : p.local) {
      if (std::ranges::find(mine, piece.region, [](const auto& r) { return r->id; }) != mine.end()) continue;
      mine.push_back(
          *std::ranges::find(prepared->regions, piece.region, [](const auto& r) { return r->id; }));
    }
  }
  return prepared;
}

Result<std::shared_ptr<Batch>> EngineImpl::submit(std::span<const Request> requests, BatchCallback done) {
  auto prepared = prepare_impl(requests);
  if (!prepared) return std::unexpected(prepared.error());
  return submit_prepared(**prepared, std::move(done), true, {});
}

Result<std::shared_ptr<Batch>> EngineImpl::submit(std::span<const Request> requests,
                                                  std::span<const std::byte> message, BatchCallback done) {
  if (message.size() > kMaxNotificationBytes)
    return fail(Errc::InvalidArgument, "submit: a notification of " + std::to_string(message.size()) +
                                           " bytes is longer than " + std::to_string(kMaxNotificationBytes));
  if (requests.empty())
    return fail(Errc::InvalidArgument, "submit: a notification needs at least one request");
  auto prepared = prepare_impl(requests);
  if (!prepared) return std::unexpected(prepared.error());
  // An empty message still notifies: submit_prepared tells "no notification" by a null data pointer.
  static constexpr std::byte kNone{};
  if (message.data() == nullptr) message = std::span<const std::byte>(&kNone, 0);
  return submit_prepared(**prepared, std::move(done), true, message);
}

Result<std::shared_ptr<Batch>> EngineImpl::try_submit(std::span<const Request> requests, BatchCallback done) {
  auto prepared = prepare_impl(requests);
  if (!prepared) return std::unexpected(prepared.error());
  return submit_prepared(**prepared, std::move(done), false, {});
}

Result<std::shared_ptr<const PreparedBatch>> EngineImpl::prepare(std::span<const Request> requests) {
  auto prepared = prepare_impl(requests);
  if (!prepared) return std::unexpected(prepared.error());
  return std::shared_ptr<const PreparedBatch>(std::move(*prepared));
}

namespace {
Result<const PreparedImpl*> ours(const PreparedBatch& prepared, const void* engine) {
  const auto* impl = dynamic_cast<const PreparedImpl*>(&prepared);
  if (impl == nullptr || impl->engine != engine)
    return fail(Errc::InvalidArgument, "submit: the request list was prepared by another engine");
  return impl;
}
}  // namespace

Result<std::shared_ptr<Batch>> EngineImpl::submit(const PreparedBatch& prepared, BatchCallback done) {
  auto impl = ours(prepared, this);
  if (!impl) return std::unexpected(impl.error());
  return submit_prepared(**impl, std::move(done), true, {});
}

Result<std::shared_ptr<Batch>> EngineImpl::try_submit(const PreparedBatch& prepared, BatchCallback done) {
  auto impl = ours(prepared, this);
  if (!impl) return std::unexpected(impl.error());
  return submit_prepared(**impl, std::move(done), false, {});
}

// Re-validates a prepared list per segment (still there, still long enough) and per local region (still
// registered, reachable over the segment's transport), then posts. `message.data()` null: no notification.
Result<std::shared_ptr<Batch>> EngineImpl::submit_prepared(const PreparedImpl& prepared, BatchCallback done,
                                                           bool blocking,
                                                           std::span<const std::byte> message) {
  std::vector<std::shared_ptr<const SegmentEntry>> current(prepared.handles.size());
  for (std::size_t h = 0; h < prepared.handles.size(); ++h) {
    current[h] = entry(prepared.handles[h]);
    const auto& e = current[h];
    if (!e)
      return fail(Errc::InvalidArgument, "submit: no segment handle " + std::to_string(prepared.handles[h]));
    if (e->gone) return fail(Errc::NotFound, "submit: segment '" + e->name + "' is gone");
    if (e->record.file != prepared.handle_is_file[h])
      return fail(Errc::InvalidArgument, "submit: segment '" + e->name + "' was republished as " +
                                             (e->record.file ? "a file" : "a memory") +
                                             " segment since the request list was prepared");
    if (prepared.extents[h] > e->record.length)
      return fail(Errc::InvalidArgument, "submit: segment '" + e->name + "' (" +
                                             std::to_string(e->record.length) +
                                             " bytes) is shorter than the request list needs");
  }
  {
    std::shared_lock lock(table_);
    for (const auto& region : prepared.regions) {
      if (!locals_by_id_.contains(region->id))
        return fail(Errc::InvalidArgument, "submit: the request list uses local memory unregistered since");
    }
  }
  auto handle_entry = [&](std::uint32_t handle) -> const std::shared_ptr<const SegmentEntry>& {
    return current[static_cast<std::size_t>(std::ranges::find(prepared.handles, handle) -
                                            prepared.handles.begin())];
  };
  const bool notify = message.data() != nullptr;
  if (notify) {
    for (const auto& e : current) {
      if (e->peer != current.front()->peer)
        return fail(Errc::InvalidArgument, "submit: a notified batch goes to one owner; '" + e->name +
                                               "' is '" + e->record.owner + "''s, '" + current.front()->name +
                                               "' is '" + current.front()->record.owner + "''s");
    }
  }
  auto batch = std::make_shared<BatchImpl>(prepared.requests, std::move(done));
  batch->set_self(batch);
  batch->set_progress([handle = progress_handle_] {
    std::shared_lock lock(handle->mutex);
    return handle->engine != nullptr && handle->engine->poll_rails();
  });
  if (prepared.requests == 0) return batch;  // an empty batch is done at once
  std::vector<std::unique_ptr<InflightOp>> ops;
  ops.reserve(prepared.planned.size());
  for (std::size_t k = 0; k < prepared.planned.size(); ++k) {
    const auto& p = prepared.planned[k];
    auto op = std::make_unique<InflightOp>();
    op->batch = batch;
    op->handle = p.segment;
    op->entry = handle_entry(p.segment);
    op->regions = prepared.op_regions[k];
    for (const auto& region : op->regions) {
      if (!region->reaches(op->entry->transport))
        return fail(Errc::NotSupported,
                    "submit: segment '" + op->entry->name + "' is reached over " + op->entry->transport +
                        ", which did not register the local memory (" + region->refusals + ")");
    }
    op->op = p;
    ops.push_back(std::move(op));
  }
  auto files = file_groups(prepared, batch, handle_entry);
  std::vector<std::uint32_t> reserved;
  if (!blocking) {
    if (auto room = reserve_file_groups(files); !room) return std::unexpected(room.error());
    if (auto room = reserve_all(ops, reserved); !room) {
      for (const auto& group : files)
        group.peer->credits.release(static_cast<std::uint32_t>(group.ops.size()));
      return std::unexpected(room.error());
    }
  }
  for (std::size_t i = 0; i < prepared.requests; ++i) batch->expect(i, prepared.pieces[i]);
  if (notify) {
    std::weak_ptr<BatchImpl> weak = batch;
    auto handle = prepared.first_handle;
    std::vector<std::byte> copy(message.begin(), message.end());
    batch->expect_notification([this, weak, handle, copy = std::move(copy)]() mutable {
      run_task([this, weak, handle, copy = std::move(copy)] {
        auto b = weak.lock();
        if (!b) return;
        if (b->failed() != 0) {
          return b->notified(fail(Errc::Unavailable, "notification not sent: " + std::to_string(b->failed()) +
                                                         " of " + std::to_string(b->size()) +
                                                         " requests failed"));
        }
        auto target = entry(handle);
        b->notified(target->gone ? fail(Errc::NotFound,
                                        "notification not sent: segment '" + target->name + "' is gone")
                                 : send_notification(*target, copy));
      });
    });
  }
  requests_.fetch_add(prepared.requests, std::memory_order_relaxed);
  coalesced_.fetch_add(prepared.coalesced, std::memory_order_relaxed);
  auto deadline = Clock::now() + options_.submit_timeout;
  queue_file_groups(std::move(files), !blocking, deadline);
  if (!ops.empty()) post_all(std::move(ops), deadline, blocking ? nullptr : &reserved);
  return batch;
}

// All or nothing: each peer's credits for all of its ops, and on every rail one of its links uses as many
// (more than needed when a peer's links span several rails; what is left over goes back after posting).
Result<void> EngineImpl::reserve_all(const std::vector<std::unique_ptr<InflightOp>>& ops,
                                     std::vector<std::uint32_t>& rails) {
  rails.assign(rails_.size(), 0);
  std::vector<std::pair<Peer*, std::uint32_t>> peers;
  for (const auto& op : ops) {
    auto* peer = op->entry->peer.get();
    auto it = std::ranges::find(peers, peer, &std::pair<Peer*, std::uint32_t>::first);
    if (it == peers.end())
      peers.emplace_back(peer, 1);
    else
      ++it->second;
  }
  std::vector<std::uint32_t> total(rails_.size(), 0);
  for (auto& [peer, n] : peers) {
    for (std::size_t i = 0; i < rails_.size(); ++i) {
      if (std::ranges::any_of(peer->links, [&](const auto& l) { return l->rail->index == i; })) total[i] += n;
    }
  }
  rails = total;
  for (const auto& [peer, n] : peers) {
    if (n > peer->credits.total())
      return fail(Errc::InvalidArgument, "try_submit: " + std::to_string(n) + " work requests to '" +
                                             peer->owner + "' exceed max_inflight_per_peer " +
                                             std::to_string(options_.max_inflight_per_peer) +
                                             " (use submit())");
  }
  for (std::size_t i = 0; i < rails.size(); ++i) {
    if (rails[i] > rails_[i]->credits->total())
      return fail(Errc::InvalidArgument,
                  "try_submit: " + std::to_string(rails[i]) + " work requests exceed max_inflight_per_rail " +
                      std::to_string(options_.max_inflight_per_rail) + " (use submit())");
  }
  std::size_t taken_peers = 0, taken_rails = 0;
  bool ok = true;
  for (; taken_peers < peers.size() && ok; ++taken_peers)
    ok = peers[taken_peers].first->credits.try_take_exact(peers[taken_peers].second);
  if (!ok) --taken_peers;
  for (; ok && taken_rails < rails.size(); ++taken_rails) {
    ok = rails[taken_rails] == 0 || rails_[taken_rails]->credits->try_take_exact(rails[taken_rails]);
    if (!ok) break;
  }
  if (ok) return {};
  for (std::size_t i = 0; i < taken_peers; ++i) peers[i].first->credits.release(peers[i].second);
  for (std::size_t i = 0; i < taken_rails; ++i) {
    if (rails[i] != 0) rails_[i]->credits->release(rails[i]);
  }
  return fail(Errc::ResourceExhausted, "try_submit: would block: no room for " + std::to_string(ops.size()) +
                                           " work requests now (max_inflight_per_peer " +
                                           std::to_string(options_.max_inflight_per_peer) +
                                           ", max_inflight_per_rail " +
                                           std::to_string(options_.max_inflight_per_rail) + ")");
}

void EngineImpl::post_all(std::vector<std::unique_ptr<InflightOp>> ops, Clock::time_point deadline,
                          std::vector<std::uint32_t>* reserved) {
  std::vector<std::uint32_t> rail_used(rails_.size(), 0);
  std::ranges::stable_sort(ops, {}, [](const auto& op) { return op->entry->peer.get(); });
  std::size_t next = 0;
  while (next < ops.size()) {
    auto* peer = ops[next]->entry->peer.get();
    auto end = next;
    while (end < ops.size() && ops[end]->entry->peer.get() == peer) ++end;
    std::vector<std::unique_ptr<InflightOp>> group(std::make_move_iterator(ops.begin() + next),
                                                   std::make_move_iterator(ops.begin() + end));
    std::size_t posted = 0;
    while (posted < group.size()) post_round(*peer, group, posted, deadline, reserved != nullptr, rail_used);
    next = end;
  }
  if (reserved == nullptr) return;
  for (std::size_t i = 0; i < rails_.size(); ++i) {
    if ((*reserved)[i] > rail_used[i]) rails_[i]->credits->release((*reserved)[i] - rail_used[i]);
  }
}

// Posts the next few work requests of `ops` (all to `peer`) as one chain on the peer's next link, once the
// bounds allow; spreading rounds over the links stripes a long request over every connection and device.
void EngineImpl::post_round(Peer& peer, std::vector<std::unique_ptr<InflightOp>>& ops, std::size_t& next,
                            Clock::time_point deadline, bool reserved,
                            std::vector<std::uint32_t>& rail_used) {
  auto links = static_cast<std::uint32_t>(peer.links.size());
  auto left = static_cast<std::uint32_t>(ops.size() - next);
  auto wanted = std::clamp<std::uint32_t>(left / links, 1, 32);
  auto& link = *peer.links[peer.next_link.fetch_add(1, std::memory_order_relaxed) % links];
  std::uint32_t granted = 0, rail_granted = 0;
  if (reserved) {
    granted = rail_granted = std::min(wanted, left);  // taken by reserve_all
  } else {
    granted = peer.credits.acquire(wanted, deadline);
    rail_granted = granted == 0 ? 0 : link.rail->credits->acquire(granted, deadline);
    if (rail_granted < granted) peer.credits.release(granted - rail_granted);
  }
  rail_used[link.rail->index] += rail_granted;
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
    for (auto& op : chain) {
      // Named as a completion's failure is: the first failure of a request is what its error leads with.
      Error error(first.error().code(), describe_op(*op) + ": post: " + first.error().message(),
                  first.error().sys_errno(), first.error().status());
      complete(std::move(op), &error, transient(first.error().code()));
    }
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
  Error error(Errc::TransportFailure, describe_op(*op) + ": " + std::string(to_string(completion.status)), 0,
              completion.status);
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
  note_error(*op, *error);
  {
    std::lock_guard lock(retry_mutex_);
    retry_queue_.push_back(std::move(op));
  }
  retry_ready_.notify_one();
}

void EngineImpl::fail_op(InflightOp& op, const Error& error) {
  if (!op.first_error) {
    for (auto r : op.op.requests) op.batch->piece_done(r, &error);
    return;
  }
  // The code is the last attempt's (NotFound: the name is gone now); the message starts with the cause.
  note_error(op, error);
  Error told(error.code(), "first failure: " + op.first_error->describe() + "; then " + op.retry_errors,
             error.sys_errno(),
             error.code() == Errc::TransportFailure ? error.status() : op.first_error->status());
  for (auto r : op.op.requests) op.batch->piece_done(r, &told);
}

void EngineImpl::retry_loop() {
  while (true) {
    std::unique_ptr<InflightOp> op;
    std::function<void()> task;
    {
      std::unique_lock lock(retry_mutex_);
      retry_ready_.wait(lock, [&] { return stop_.load() || !retry_queue_.empty() || !tasks_.empty(); });
      if (retry_queue_.empty() && tasks_.empty()) {
        retry_exited_ = true;  // run_task runs later tasks itself
        return;
      }
      if (!tasks_.empty()) {
        task = std::move(tasks_.front());
        tasks_.pop_front();
      } else {
        op = std::move(retry_queue_.front());
        retry_queue_.pop_front();
      }
    }
    if (task) task();  // a notification's send: it fails at once once the engine is closing
    if (op) retry_one(std::move(op));
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
