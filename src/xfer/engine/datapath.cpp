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
  return std::string(op.op->write ? "WRITE" : "READ") + " of " + std::to_string(op.op->length) +
         " bytes at " + std::to_string(op.op->offset) + " of segment '" + op.entry->name + "' (owner '" +
         op.entry->record.owner + "')";
}

// Remembers the first failure of a work request that will be retried, and each retry's after it.
void note_error(InflightOp& op, const Error& error) {
  if (!op.retries) {
    op.retries = std::make_unique<InflightOp::Retries>(InflightOp::Retries{error, {}});
    return;
  }
  if (!op.retries->later.empty()) op.retries->later += "; ";
  op.retries->later += "retry " + std::to_string(op.attempts) + ": " + error.describe();
}

}  // namespace

Result<std::vector<PlanItem>> EngineImpl::check(std::span<const Request> requests,
                                                std::vector<std::uint8_t>& file,
                                                std::vector<std::shared_ptr<LocalRegion>>& regions) const {
  std::vector<PlanItem> items(requests.size());  // one per request, filled by index
  file.assign(requests.size(), 0);
  std::shared_ptr<const SegmentEntry> last;
  std::uint32_t last_handle = 0;
  const LocalRegion* checked_local = nullptr;  // kept alive by `regions`
  const SegmentEntry* checked_entry = nullptr;
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
    auto inside = [&](const LocalRegion& region) {
      return address >= region.addr && r.length <= region.size &&
             address - region.addr <= region.size - r.length;
    };
    auto plan = [&](const LocalRegion& region) {
      file[i] = last->record.file;
      items[i] = PlanItem{static_cast<std::uint32_t>(i),
                          r.segment.value,
                          r.op == Op::Write,
                          region.id,
                          address,
                          r.offset,
                          r.length};
    };
    // Requests in a row mostly lie in the registration of the one before, to the same segment: those are
    // checked against it without a search and without comparing transport names again.
    if (checked_local != nullptr && checked_entry == last.get() && inside(*checked_local)) {
      plan(*checked_local);
      continue;
    }
    auto known = std::ranges::find_if(regions, [&](const auto& region) { return inside(*region); });
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
    // A file segment's owner pushes its chunks into the local memory (and pulls a WRITE's bytes from it)
    // with one-sided operations on this rail: device memory the rail registered is reached as the
    // transport reaches it (verbs: GPUDirect; tcp: staged by the target's progress thread; shm: CUDA IPC).
    plan(*local);
    checked_local = local.get();
    checked_entry = last.get();
  }
  return items;
}

// Checks and plans once: what submit() does before it posts, kept for submitting again.
Result<std::shared_ptr<PreparedImpl>> EngineImpl::prepare_impl(std::span<const Request> requests) const {
  std::vector<std::uint8_t> file;
  auto prepared = std::make_shared<PreparedImpl>();
  auto items = check(requests, file, prepared->regions);
  if (!items) return std::unexpected(items.error());
  prepared->engine = this;
  prepared->requests = requests.size();
  if (!requests.empty()) prepared->first_handle = requests.front().segment.value;
  auto handle_index = [&](std::uint32_t handle) {
    return static_cast<std::uint32_t>(std::ranges::find(prepared->handles, handle) -
                                      prepared->handles.begin());
  };
  std::uint32_t h = 0;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const auto& r = requests[i];
    if (h == prepared->handles.size() || prepared->handles[h] != r.segment.value)
      h = handle_index(r.segment.value);
    if (h == prepared->handles.size()) {
      prepared->handles.push_back(r.segment.value);
      prepared->extents.push_back(0);
      prepared->handle_is_file.push_back(file[i]);
    }
    prepared->extents[h] = std::max(prepared->extents[h], r.offset + r.length);
  }
  auto region_index = [&](std::uint32_t id) {
    return static_cast<std::uint32_t>(
        std::ranges::find(prepared->regions, id, [](const auto& r) { return r->id; }) -
        prepared->regions.begin());
  };
  // File segments' requests are not planned: the owner reads and delivers each (files.hpp).
  auto is_file = [&](const PlanItem& item) { return file[item.request]; };
  for (const auto& item : *items) {
    if (!is_file(item)) continue;
    prepared->file_items.push_back(item);
    prepared->file_regions.push_back(prepared->regions[region_index(item.region)]);
  }
  std::erase_if(*items, is_file);
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
  prepared->piece_regions.reserve(prepared->planned.pieces.size());
  std::uint32_t last_id = 0, last_index = 0;  // ids start at 1; pieces in a row mostly share one
  for (const auto& piece : prepared->planned.pieces) {
    if (piece.region != last_id) last_id = piece.region, last_index = region_index(piece.region);
    prepared->piece_regions.push_back(last_index);
  }
  prepared->op_handles.reserve(prepared->planned.size());
  for (const auto& p : prepared->planned) {
    for (auto r : p.requests) ++prepared->pieces[r];
    if (p.requests.size() > 1) prepared->coalesced += p.requests.size();
    auto h = prepared->op_handles.empty() || prepared->handles[prepared->op_handles.back()] != p.segment
                 ? handle_index(p.segment)
                 : prepared->op_handles.back();
    prepared->op_handles.push_back(h);
    for (std::size_t j = 0; j < p.local.size(); ++j) {
      std::pair<std::uint32_t, std::uint32_t> pair{h, prepared->piece_regions[p.first_piece + j]};
      if ((prepared->handle_regions.empty() || prepared->handle_regions.back() != pair) &&
          std::ranges::find(prepared->handle_regions, pair) == prepared->handle_regions.end())
        prepared->handle_regions.push_back(pair);
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
  // The transport check, once per (segment, local registration) pair the list uses, not per work request.
  for (auto [h, r] : prepared.handle_regions) {
    const auto& e = current[h];
    const auto& region = prepared.regions[r];
    if (!region->reaches(e->transport))
      return fail(Errc::NotSupported, "submit: segment '" + e->name + "' is reached over " + e->transport +
                                          ", which did not register the local memory (" + region->refusals +
                                          ")");
  }
  auto batch = std::make_shared<BatchImpl>(prepared.pieces, std::move(done));
  batch->set_self(batch);
  batch->set_progress(progress_handle_);
  if (prepared.requests == 0) return batch;  // an empty batch is done at once
  // The records of every work request, one allocation for the batch; grouped by peer (stable: a peer's
  // ops keep the plan's order), so each chain is a run of them.
  std::vector<InflightOp> ops(prepared.planned.size());
  for (std::size_t k = 0; k < ops.size(); ++k) {
    const auto& p = prepared.planned[k];
    ops[k].op = &p;
    ops[k].handle = p.segment;
    ops[k].entry = current[prepared.op_handles[k]].get();
  }
  auto by_peer = [](const InflightOp& op) { return op.entry->peer.get(); };
  if (!std::ranges::is_sorted(ops, {}, by_peer)) std::ranges::stable_sort(ops, {}, by_peer);
  batch->attach(prepared.shared_from_this(), current, std::move(ops));
  auto files = file_groups(prepared, batch, handle_entry);
  batch->set_paths(paths_of(prepared, current, files));
  std::vector<std::uint32_t> reserved;
  if (!blocking) {
    if (auto room = reserve_file_groups(files); !room) return std::unexpected(room.error());
    if (auto room = reserve_all(*batch, reserved); !room) {
      for (const auto& group : files)
        group.peer->credits.release(static_cast<std::uint32_t>(group.ops.size()));
      return std::unexpected(room.error());
    }
  }
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
  // Counted before the file requests go: a batch of file requests only can finish on a file link's thread
  // as soon as they are queued, and all_done() then releases ops_ there (a read after would race).
  const auto memory_ops = batch->ops_size();
  queue_file_groups(std::move(files), !blocking, deadline);
  if (memory_ops != 0) {
    // The poster reaps what its posts completed (shm completes within post) before it lets the progress
    // threads take over: a batch that is done by now costs them no wake-up.
    enter_reaping();
    post_all(batch, 0, memory_ops, deadline, blocking ? nullptr : &reserved);
    poll_rails();
    leave_reaping();
  }
  return batch;
}

BatchImpl::PathBits EngineImpl::paths_of(const PreparedImpl& prepared,
                                         std::span<const std::shared_ptr<const SegmentEntry>> current,
                                         const std::vector<FileGroup>& files) const {
  BatchImpl::PathBits bits;
  bits.names = path_names_;
  auto transport_bit = [&](std::string_view transport) {
    auto at = std::ranges::find(transports_, transport, &OfferedTransport::name) - transports_.begin();
    return 1u << static_cast<unsigned>(at);
  };
  // The path a registration takes on the rails of `transport` (the same on each of them).
  auto memory_bit = [&](const LocalRegion& region, std::string_view transport) {
    for (const auto& rail : rails_)
      if (rail->transport == transport && rail->index < region.by_rail.size() && region.by_rail[rail->index])
        return 1u << static_cast<unsigned>(region.by_rail[rail->index]->path());
    return 0u;
  };
  for (auto [h, r] : prepared.handle_regions) {
    bits.transports |= transport_bit(current[h]->transport);
    bits.memory |= memory_bit(*prepared.regions[r], current[h]->transport);
  }
  const std::uint32_t file_bit = 1u << static_cast<unsigned>(transports_.size());
  for (const auto& group : files) {
    std::uint32_t last_request = UINT32_MAX;
    for (const auto& op : group.ops) {
      if (op.request == last_request) continue;  // the pieces of one request are in a row
      last_request = op.request;
      if (op.read_locally != nullptr) {
        ++bits.file_local;
        bits.transports |= file_bit;
        bits.memory |= 1u << static_cast<unsigned>(MemoryPath::Host);
      } else {
        ++bits.file_by_owner;
        bits.transports |= transport_bit(group.entry->transport);
        bits.memory |= memory_bit(*op.region, group.entry->transport);
      }
    }
  }
  return bits;
}

// All or nothing: each peer's credits for all of its ops, and on every rail one of its links uses as many
// (more than needed when a peer's links span several rails; what is left over goes back after posting).
Result<void> EngineImpl::reserve_all(BatchImpl& batch, std::vector<std::uint32_t>& rails) {
  rails.assign(rails_.size(), 0);
  std::vector<std::pair<Peer*, std::uint32_t>> peers;
  for (std::uint32_t k = 0; k < batch.ops_size(); ++k) {
    auto* peer = batch.op(k).entry->peer.get();
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
  return fail(Errc::ResourceExhausted,
              "try_submit: would block: no room for " + std::to_string(batch.ops_size()) +
                  " work requests now (max_inflight_per_peer " +
                  std::to_string(options_.max_inflight_per_peer) + ", max_inflight_per_rail " +
                  std::to_string(options_.max_inflight_per_rail) + ")");
}

void EngineImpl::post_all(const std::shared_ptr<BatchImpl>& batch, std::uint32_t begin, std::uint32_t end,
                          Clock::time_point deadline, std::vector<std::uint32_t>* reserved) {
  std::vector<std::uint32_t> rail_used(rails_.size(), 0);
  // The ops are grouped by peer (submit_prepared): each group is posted in rounds to its peer.
  for (std::uint32_t next = begin; next < end;) {
    auto* peer = batch->op(next).entry->peer.get();
    auto group_end = next;
    while (group_end < end && batch->op(group_end).entry->peer.get() == peer) ++group_end;
    while (next < group_end)
      post_round(*peer, batch, next, group_end, deadline, reserved != nullptr, rail_used);
  }
  if (reserved == nullptr) return;
  for (std::size_t i = 0; i < rails_.size(); ++i) {
    if ((*reserved)[i] > rail_used[i]) rails_[i]->credits->release((*reserved)[i] - rail_used[i]);
  }
}

// Posts the next few of the batch's ops [next, end) (all to `peer`) as one chain on the peer's next link,
// once the bounds allow; spreading rounds over the links stripes a long request over every connection and
// device.
void EngineImpl::post_round(Peer& peer, const std::shared_ptr<BatchImpl>& batch, std::uint32_t& next,
                            std::uint32_t end, Clock::time_point deadline, bool reserved,
                            std::vector<std::uint32_t>& rail_used) {
  auto links = static_cast<std::uint32_t>(peer.links.size());
  auto left = end - next;
  auto wanted = std::clamp<std::uint32_t>(left / links, 1, 32);
  auto& link = *peer.links[peer.next_link.fetch_add(1, std::memory_order_relaxed) % links];
  std::uint32_t granted = 0, rail_granted = 0;
  if (reserved) {
    granted = rail_granted = std::min(wanted, left);  // taken by reserve_all
  } else {
    granted = take_credits(peer.credits, wanted, deadline);
    rail_granted = granted == 0 ? 0 : take_credits(*link.rail->credits, granted, deadline);
    if (rail_granted < granted) peer.credits.release(granted - rail_granted);
  }
  // No wake-up of the progress thread here: every poster is a reaper (submit, retry_one), and leaving that
  // role wakes it when work is still in flight.
  rail_used[link.rail->index] += rail_granted;
  if (rail_granted == 0) {
    Error busy(Errc::ResourceExhausted, "busy: " + std::to_string(left) + " work requests to '" + peer.owner +
                                            "' could not be posted within "
                                            "submit_timeout (max_inflight_per_peer " +
                                            std::to_string(options_.max_inflight_per_peer) +
                                            ", max_inflight_per_rail " +
                                            std::to_string(options_.max_inflight_per_rail) + ")");
    // The last fail_op may finish the batch: nothing of it is looked at after the loop.
    for (auto k = next; k < end; ++k) fail_op(*batch, k, busy);
    next = end;
    return;
  }
  auto first = next;
  next += rail_granted;
  post_chain(link, batch, first, rail_granted);
}

void EngineImpl::post_chain(Link& link, const std::shared_ptr<BatchImpl>& batch, std::uint32_t begin,
                            std::uint32_t count) {
  // The work requests and their scatter-gather lists are built in this thread's scratch arrays: post()
  // copies what it keeps, so nothing is allocated per chain once they have grown.
  thread_local std::vector<Segment> segments_scratch;
  thread_local std::vector<WorkRequest> wrs_scratch;
  auto& segments = segments_scratch;  // one TLS lookup each (in a shared library, every use is a call)
  auto& wrs = wrs_scratch;
  std::size_t sges = 0;
  for (auto k = begin; k < begin + count; ++k) sges += batch->op(k).op->local.size();
  segments.resize(sges);
  wrs.clear();
  wrs.reserve(count);
  const auto& prepared = *batch->prepared();
  const auto rail_index = link.rail->index;
  std::size_t used = 0;
  auto key_region = UINT32_MAX;  // the registration whose key `lkey` is (pieces in a row share one)
  decltype(prepared.regions[0]->by_rail[0]->lkey()) lkey{};
  for (auto k = begin; k < begin + count; ++k) {
    const auto& op = batch->op(k);
    const auto& planned = *op.op;
    auto first = used;
    for (std::size_t j = 0; j < planned.local.size(); ++j) {
      const auto& piece = planned.local[j];
      if (auto r = prepared.piece_regions[planned.first_piece + j]; r != key_region) {
        key_region = r;
        lkey = prepared.regions[r]->by_rail[rail_index]->lkey();
      }
      segments[used++] = Segment{piece.addr, piece.length, lkey};
    }
    wrs.push_back(
        WorkRequest{.opcode = planned.write ? Opcode::Write : Opcode::Read,
                    .local = std::span<const Segment>(segments.data() + first, planned.local.size()),
                    .remote = op.entry->remote[link.remote_rail].at(planned.offset),
                    .signaled = k + 1 == begin + count});
  }
  work_requests_.fetch_add(count, std::memory_order_relaxed);
  link.rail->work_requests.fetch_add(count, std::memory_order_relaxed);
  auto first = link.connection->post(wrs);
  if (!first) {
    link.rail->credits->release(count);
    batch->op(begin).entry->peer->credits.release(count);
    for (auto k = begin; k < begin + count; ++k) {
      // Named as a completion's failure is: the first failure of a request is what its error leads with.
      Error error(first.error().code(), describe_op(batch->op(k)) + ": post: " + first.error().message(),
                  first.error().sys_errno(), first.error().status());
      op_failed(batch, k, error, transient(first.error().code()));
    }
    return;
  }
  // Completions a reaper (the progress thread or a waiter) took before this chain was known wait in `early`:
  // they are applied here, in id order (their queue order), in the same critical section that makes the
  // chain known, so no later completion of the chain can be applied before them.
  Rail& rail = *link.rail;
  std::vector<std::pair<Finished, Completion>> ready;
  {
    std::lock_guard lock(rail.ops_mutex);
    const std::uint64_t last = *first + count - 1;
    auto it = rail.chains.emplace(last, InflightChain{*first, 0, begin, count, batch}).first;
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
    } else if (self_reapers_.load() > 0 || (rail.credits->in_use() == 0 && empty_polls >= kLingerPolls)) {
      // Nothing in flight, or a thread reaps for itself: sleep until work is posted with nobody reaping it
      // (leave_reaping wakes us), looking again every millisecond while a reaper is there.
      std::unique_lock lock(rail.idle_mutex);
      rail.progress_sleeping.store(true);
      bool reaper = self_reapers_.load() > 0;
      rail.work_posted.wait_for(
          lock, reaper ? std::chrono::milliseconds(1) : std::chrono::milliseconds(20),
          [&] { return (rail.credits->in_use() > 0 && self_reapers_.load() == 0) || stop_.load(); });
      rail.progress_sleeping.store(false);
      empty_polls = kLingerPolls - 1;  // one look, then back to sleep if there is still nothing
      if (self_reapers_.load() > 0) {
        reap(rail);
        continue;
      }
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

void EngineImpl::leave_reaping() {
  if (self_reapers_.fetch_sub(1) != 1) return;
  // Both sides sequentially consistent: either we see the sleeper, or it sees no reaper left.
  for (auto& rail : rails_) {
    if (rail->progress_sleeping.load() && rail->credits->in_use() > 0) {
      std::lock_guard lock(rail->idle_mutex);
      rail->work_posted.notify_one();
    }
  }
}

std::uint32_t EngineImpl::take_credits(Credits& credits, std::uint32_t wanted, Clock::time_point deadline) {
  while (true) {
    if (auto granted = credits.try_take(wanted); granted != 0) return granted;
    if (!poll_rails()) break;  // our own completions free credits without a hand-off
  }
  leave_reaping();
  auto granted = credits.acquire(wanted, deadline);
  enter_reaping();
  return granted;
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
  const auto k = static_cast<std::uint32_t>(completion.id - chain.first);
  if (k < chain.done) return false;  // not expected: a work request completes once
  finished.begin = chain.begin + chain.done;
  finished.ok = k - chain.done + (completion.ok() ? 1 : 0);
  finished.failed = !completion.ok();
  chain.done = k + 1;
  if (chain.done < chain.count) {
    finished.batch = chain.batch;
    return false;
  }
  finished.batch = std::move(chain.batch);
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

// One completion: the credits of every work request it finished go back at once, and the requests they
// carried are retired together (BatchImpl::ops_done).
void EngineImpl::finish(Rail& rail, Finished finished, const Completion& completion) {
  if (finished.count() == 0) return;
  auto& batch = *finished.batch;
  auto n = static_cast<std::uint32_t>(finished.count());
  rail.credits->release(n);
  batch.op(finished.begin).entry->peer->credits.release(n);
  const auto failed = finished.begin + finished.ok;
  std::optional<Error> error;
  bool retryable = false;
  if (finished.failed) {  // named before ops_done may finish (and release) the batch's records
    error.emplace(Errc::TransportFailure,
                  describe_op(batch.op(failed)) + ": " + std::string(to_string(completion.status)), 0,
                  completion.status);
    retryable = transient(completion.status);
  }
  if (finished.ok != 0) batch.ops_done(finished.begin, finished.ok);
  if (error) op_failed(finished.batch, failed, *error, retryable);
}

void EngineImpl::op_failed(const std::shared_ptr<BatchImpl>& batch, std::uint32_t k, const Error& error,
                           bool retryable) {
  auto& op = batch->op(k);
  if (!retryable || op.attempts >= options_.max_retries || stop_.load(std::memory_order_acquire)) {
    return fail_op(*batch, k, error);
  }
  note_error(op, error);
  {
    std::lock_guard lock(retry_mutex_);
    retry_queue_.push_back(RetryItem{batch, k});
  }
  retry_ready_.notify_one();
}

void EngineImpl::fail_op(BatchImpl& batch, std::uint32_t k, const Error& error) {
  auto& op = batch.op(k);
  // piece_done may finish the batch (and release its records): the requests are read first.
  auto requests = op.op->requests;
  if (!op.retries) {
    for (auto r : requests) batch.piece_done(r, &error);
    return;
  }
  // The code is the last attempt's (NotFound: the name is gone now); the message starts with the cause.
  note_error(op, error);
  Error told(error.code(), "first failure: " + op.retries->first.describe() + "; then " + op.retries->later,
             error.sys_errno(),
             error.code() == Errc::TransportFailure ? error.status() : op.retries->first.status());
  for (auto r : requests) batch.piece_done(r, &told);
}

void EngineImpl::retry_loop() {
  while (true) {
    std::optional<RetryItem> item;
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
        item = std::move(retry_queue_.front());
        retry_queue_.pop_front();
      }
    }
    if (task) task();  // a notification's send: it fails at once once the engine is closing
    if (item) retry_one(std::move(*item));
  }
}

// Re-resolves the op's segment unless another op already did since it was posted, then posts it again.
void EngineImpl::retry_one(RetryItem item) {
  auto& batch = *item.batch;
  auto& op = batch.op(item.index);
  if (stop_.load(std::memory_order_acquire)) {
    return fail_op(batch, item.index, Error(Errc::ConnectionBroken, "xfer engine closed before a retry"));
  }
  ++op.attempts;
  retries_.fetch_add(1, std::memory_order_relaxed);
  auto current = entry(op.handle);
  if (current->generation == op.entry->generation) {
    std::lock_guard lock(control_);
    current = entry(op.handle);
    if (current->generation == op.entry->generation) {
      auto fresh = resolve(current->name, next_generation_++, current.get());
      if (!fresh) return fail_op(batch, item.index, fresh.error());
      install(op.handle, *fresh);
      current = *fresh;
    }
  }
  if (current->gone) {
    return fail_op(
        batch, item.index,
        Error(Errc::NotFound, "segment '" + current->name +
                                  "' is gone from the metadata (unpublished, or its owner's lease ran out: "
                                  "the owner died, is stopped or hung, or lost the metadata server)"));
  }
  if (op.op->offset + op.op->length > current->record.length) {
    return fail_op(batch, item.index,
                   Error(Errc::InvalidArgument, "segment '" + current->name + "' shrank below the request"));
  }
  // A re-resolve may pick another transport (the owner published anew): our memory must be on it too.
  const auto& prepared = *batch.prepared();
  for (std::size_t j = 0; j < op.op->local.size(); ++j) {
    const auto& region = prepared.regions[prepared.piece_regions[op.op->first_piece + j]];
    if (!region->reaches(current->transport)) {
      return fail_op(batch, item.index,
                     Error(Errc::NotSupported, "segment '" + current->name + "' is now reached over " +
                                                   current->transport +
                                                   ", which did not register the "
                                                   "local memory (" +
                                                   region->refusals + ")"));
    }
  }
  op.renewed = std::move(current);
  op.entry = op.renewed.get();
  enter_reaping();  // post_all's posters are reapers (post_round does not wake the progress thread)
  post_all(item.batch, item.index, item.index + 1, Clock::now() + options_.submit_timeout);
  leave_reaping();
}

}  // namespace rdmakit::xfer::detail
