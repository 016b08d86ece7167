// File segments, the requester's side and the wire (files.hpp says how the bytes travel and why by push):
// requests to a file segment become messages of at most kFileMessageBytes on the peer's file connection,
// at most kFileWindow unanswered; each finishes with the owner's answer, or fails when the connection
// breaks or the owner stays silent for peer_timeout.
#include <algorithm>
#include <map>

#include "bootstrap/peer_proof.hpp"
#include "core/log.hpp"
#include "xfer/engine/engine_impl.hpp"

namespace rdmakit::xfer::detail {

using Clock = std::chrono::steady_clock;
using rdmakit::detail::MessageChannel;
using rdmakit::detail::PayloadReader;
using rdmakit::detail::PayloadWriter;

const rdmakit::detail::FrameSpec kFileSpec{.name = "xfer file segment",
                                           .magic = 0x7846'5331,  // "xFS1"
                                           .version = 1,
                                           .max_type = kFileDone,
                                           .max_payload = 48 + kMaxFileSegmentName + kMaxFileReplyText};

Result<std::vector<std::byte>> encode_request(const FileRequestMessage& request) {
  if (request.name.empty() || request.name.size() > kMaxFileSegmentName)
    return fail(Errc::InvalidArgument, "file segment name of " + std::to_string(request.name.size()) +
                                           " bytes (1 to " + std::to_string(kMaxFileSegmentName) + ")");
  std::vector<std::byte> out(44 + request.name.size());
  PayloadWriter w(out);
  w.put(request.id).put(request.offset).put(request.length).put(request.dest_addr).put(request.dest_rkey);
  w.put(request.dest_epoch).put_text(request.name);
  if (!w.ok()) return fail(Errc::InvalidArgument, "file request: encoding overflow");
  return out;
}

Result<FileRequestMessage> decode_request(const rdmakit::detail::Frame& frame) {
  if (frame.type != kFileRead && frame.type != kFileWrite)
    return fail(Errc::ProtocolError,
                "file segment: message type " + std::to_string(frame.type) + " where a request was expected");
  FileRequestMessage request;
  request.type = frame.type;
  PayloadReader r(kFileSpec, frame.payload);
  r.get(request.id).get(request.offset).get(request.length).get(request.dest_addr).get(request.dest_rkey);
  r.get(request.dest_epoch);
  auto name = r.rest();
  if (auto ok = r.finish(); !ok) return std::unexpected(ok.error());
  if (name.empty() || name.size() > kMaxFileSegmentName)
    return fail(Errc::ProtocolError,
                "file segment: a request naming " + std::to_string(name.size()) + " bytes of segment name");
  request.name.assign(reinterpret_cast<const char*>(name.data()), name.size());
  return request;
}

Result<std::vector<std::byte>> encode_reply(const FileReplyMessage& reply) {
  auto text = std::string_view(reply.message).substr(0, kMaxFileReplyText);
  std::vector<std::byte> out(9 + text.size());
  PayloadWriter w(out);
  w.put(reply.id).put(reply.code).put_text(text);
  if (!w.ok()) return fail(Errc::InvalidArgument, "file reply: encoding overflow");
  return out;
}

Result<FileReplyMessage> decode_reply(const rdmakit::detail::Frame& frame) {
  if (frame.type != kFileDone)
    return fail(Errc::ProtocolError,
                "file segment: message type " + std::to_string(frame.type) + " where an answer was expected");
  FileReplyMessage reply;
  PayloadReader r(kFileSpec, frame.payload);
  r.get(reply.id).get(reply.code);
  auto text = r.rest();
  if (auto ok = r.finish(); !ok) return std::unexpected(ok.error());
  if (reply.code > static_cast<std::uint8_t>(Errc::TransportFailure) || text.size() > kMaxFileReplyText)
    return fail(Errc::ProtocolError, "file segment: a malformed answer (code " + std::to_string(reply.code) +
                                         ", " + std::to_string(text.size()) + " bytes of text)");
  reply.message.assign(reinterpret_cast<const char*>(text.data()), text.size());
  return reply;
}

namespace {

std::string describe(const FileOp& op) {
  return std::string(op.write ? "WRITE" : "READ") + " of " + std::to_string(op.length) + " bytes at " +
         std::to_string(op.offset) + " of file segment '" + op.segment + "' (owner '" + op.owner + "')";
}

}  // namespace

namespace {

// The op's piece is done (its credit was given back, or never held); an error names the op and, after
// retries, the failure that started them first.
void settle_file_op(FileOp& op, const Error* error) {
  if (error == nullptr) {
    op.batch->piece_done(op.request, nullptr);
  } else if (!op.first_failure) {
    Error named(error->code(), describe(op) + ": " + error->message(), error->sys_errno(), error->status());
    op.batch->piece_done(op.request, &named);
  } else {
    Error named(error->code(),
                describe(op) + ": first failure: " + op.first_failure->describe() + "; then " +
                    op.later_failures + (op.later_failures.empty() ? "" : "; ") + "retry " +
                    std::to_string(op.attempts) + ": " + error->describe(),
                error->sys_errno(), error->status());
    op.batch->piece_done(op.request, &named);
  }
  op.batch.reset();
  op.region.reset();
}

// What the connection's failure says that a new resolution may cure (the owner restarted, moved, or came
// back): not a refusal by the owner, not the engine closing.
bool transient_file_error(Errc code) {
  return code == Errc::ConnectionBroken || code == Errc::ConnectionRefused || code == Errc::Timeout ||
         code == Errc::StaleDescriptor || code == Errc::Unavailable;
}

}  // namespace

void finish_file_op(Peer& peer, FileOp& op, const Error* error) {
  settle_file_op(op, error);
  peer.credits.release(1);
}

void EngineImpl::file_op_failed(Peer& peer, FileOp& op, const Error& error) {
  if (!transient_file_error(error.code()) || op.attempts >= options_.max_retries ||
      stop_.load(std::memory_order_acquire))
    return finish_file_op(peer, op, &error);
  if (!op.first_failure)
    op.first_failure = std::make_shared<const Error>(error);
  else
    op.later_failures += (op.later_failures.empty() ? "" : "; ") + std::string("retry ") +
                         std::to_string(op.attempts) + ": " + error.describe();
  peer.credits.release(1);
  run_task([this, op = std::move(op)]() mutable { retry_file_op(std::move(op)); });
}

// On the retry thread, as a work request's retry_one: re-resolve the name unless someone did since the op
// was queued, check that the segment still fits the op, take a credit on its (maybe new) owner, queue it.
void EngineImpl::retry_file_op(FileOp op) {
  auto fail_now = [&](const Error& error) { settle_file_op(op, &error); };
  if (stop_.load(std::memory_order_acquire))
    return fail_now(Error(Errc::ConnectionBroken, "xfer engine closed before a retry"));
  ++op.attempts;
  retries_.fetch_add(1, std::memory_order_relaxed);
  auto current = entry(op.handle);
  if (current && current->generation == op.generation) {
    std::lock_guard lock(control_);
    current = entry(op.handle);
    if (current->generation == op.generation) {
      auto fresh = resolve(current->name, next_generation_++, current.get());
      if (!fresh) return fail_now(fresh.error());
      install(op.handle, *fresh);
      current = *fresh;
    }
  }
  if (!current || current->gone)
    return fail_now(
        Error(Errc::NotFound,
              "segment '" + op.segment + "' is gone from the metadata (unpublished, or its owner died)"));
  if (!current->record.file || (op.write && !current->record.writable) ||
      op.offset + op.length > current->record.length)
    return fail_now(
        Error(Errc::InvalidArgument, "segment '" + op.segment +
                                         "' was published anew as something the request no "
                                         "longer fits (a memory segment, read-only, or shorter)"));
  if (!op.region->reaches(current->transport))
    return fail_now(Error(Errc::NotSupported, "segment '" + op.segment + "' is now reached over " +
                                                  current->transport +
                                                  ", which did not register the local "
                                                  "memory (" +
                                                  op.region->refusals + ")"));
  op.generation = current->generation;
  op.owner = current->record.owner;
  op.read_locally = local_file_for(*current, op.write, *op.region);
  if (current->peer->credits.acquire(1, Clock::now() + options_.submit_timeout) == 0)
    return fail_now(
        Error(Errc::ResourceExhausted, "busy: the retry could not be sent within submit_timeout"));
  std::vector<FileOp> one;
  one.push_back(std::move(op));
  queue_file_ops(*current->peer, *current, std::move(one));
}

namespace {

void stop_link(FileLink& link) {
  {
    std::lock_guard lock(link.mutex);
    link.stop = true;
  }
  link.wake.notify_all();
  if (link.thread.joinable()) link.thread.join();
}

}  // namespace

Peer::~Peer() {
  if (file) stop_link(*file);
}

// The engine is closing: what the link still holds fails, and later ops fail at once (a link that was never
// made is made stopped, with no thread).
void close_file_link(Peer& peer) {
  FileLink* link = nullptr;
  {
    std::lock_guard lock(peer.file_mutex);
    if (!peer.file) {
      peer.file = std::make_unique<FileLink>();
      peer.file->stop = true;
    }
    link = peer.file.get();  // never replaced once made
  }
  // Joined outside file_mutex: the thread may be running a batch callback that submits to this peer.
  stop_link(*link);
}

std::shared_ptr<const LocalFile> EngineImpl::local_file_for(const SegmentEntry& entry, bool write,
                                                            const LocalRegion& region) const {
  if (!entry.local_file || write || region.kind != MemoryKind::Host || local_reader() == nullptr)
    return nullptr;
  return entry.local_file;
}

LocalFileReader* EngineImpl::local_reader() const {
  std::lock_guard lock(local_reader_mutex_);
  if (!local_reader_ && !local_reader_failed_) {
    auto started = LocalFileReader::start(kFileWindow * 2);
    if (started) {
      local_reader_ = std::move(*started);
    } else {
      local_reader_failed_ = true;
      log::warn("xfer",
                "local file reads are off, the owners serve every READ: " + started.error().describe());
    }
  }
  return local_reader_.get();
}

void EngineImpl::queue_file_ops(Peer& peer, const SegmentEntry& entry, std::vector<FileOp> ops) {
  if (ops.empty()) return;
  if (std::ranges::any_of(ops, [](const FileOp& op) { return op.read_locally != nullptr; })) {
    // file_groups gave them their file (once local_reader() had started): those go to it, the rest to the
    // owner.
    if (auto* reader = local_reader()) {
      std::vector<FileOp> local;
      for (auto& op : ops)
        if (op.read_locally) local.push_back(std::move(op));
      std::erase_if(ops, [](const FileOp& op) { return op.batch == nullptr; });  // moved
      reader->queue(entry.peer, std::move(local));
      if (ops.empty()) return;
    } else {
      for (auto& op : ops) op.read_locally.reset();  // the engine is closing: the link fails them
    }
  }
  std::unique_lock made(peer.file_mutex);
  if (!peer.file) {
    // The owner's file server listens where its data connections do: the peer's first link's rail.
    auto& link = *peer.links.front();
    auto remote = rails_of(entry.record, entry.transport);
    peer.file = std::make_unique<FileLink>();
    peer.file->thread =
        std::thread([this, &peer, file = peer.file.get(), rail = link.rail,
                     address = remote.at(link.remote_rail)->address, owner = entry.record.owner]() mutable {
          file_link_loop(peer, *file, *rail, std::move(address), std::move(owner));
        });
  }
  auto& link = *peer.file;  // never replaced once made
  made.unlock();            // ops failed below may run a callback that submits to this peer again
  std::unique_lock queue(link.mutex);
  if (link.stop) {
    queue.unlock();
    Error closed(Errc::ConnectionBroken, "the engine is closing");
    for (auto& op : ops) finish_file_op(peer, op, &closed);
    return;
  }
  for (auto& op : ops) link.queued.push_back(std::move(op));
  queue.unlock();
  link.wake.notify_one();
}

// A connection of its own to the owner, proven as the data connections are (we prove the secret with the
// file suffix on our name; the owner must prove it is the record's owner), its receive queue the channel's
// alone so that waiting for answers sleeps in it.
Result<std::unique_ptr<MessageChannel>> EngineImpl::open_file_channel(Rail& rail, const std::string& address,
                                                                      const std::string& owner) {
  auto connection = connect_to_owner(rail, address, owner, kFileIdentitySuffix);
  if (!connection) return std::unexpected(connection.error());
  auto channel = MessageChannel::open(*rail.context, *connection, kFileSpec,
                                      {.receives = kFileWindow,
                                       .keep_posted = true,
                                       .owns_recv_queue = true,
                                       .send_timeout = options_.peer_timeout,
                                       // A window of requests leaves at once, not one per acknowledgement.
                                       .sends = kFileWindow});
  if (!channel) return std::unexpected(channel.error());
  if (auto posted = channel->expect(kFileWindow); !posted) return std::unexpected(posted.error());
  return std::make_unique<MessageChannel>(std::move(*channel));
}

// The link's thread: sends queued ops (at most kFileWindow unanswered), takes the owner's answers. A broken
// connection fails every unanswered op and the next ops open a fresh one; an owner that answers nothing for
// peer_timeout while ops wait on it is taken for dead the same way.
void EngineImpl::file_link_loop(Peer& peer, FileLink& link, Rail& rail, std::string address,
                                std::string owner) {
  std::unique_ptr<MessageChannel> channel;
  std::map<std::uint64_t, FileOp> outstanding;
  std::uint64_t next_id = 1;
  auto last_heard = Clock::now();
  // The connection failed: what it carried is retried (or fails, file_op_failed); `retryable` false: the
  // owner broke the protocol, which a new resolution does not cure.
  auto fail_outstanding = [&](const Error& error, bool retryable = true) {
    for (auto& [id, op] : outstanding) {
      if (retryable)
        file_op_failed(peer, op, error);
      else
        finish_file_op(peer, op, &error);
    }
    outstanding.clear();
    channel.reset();  // closes the connection: the owner drops what it still had of ours
  };
  while (true) {
    std::vector<FileOp> sending;
    {
      std::unique_lock lock(link.mutex);
      if (outstanding.empty())
        link.wake.wait_for(lock, std::chrono::milliseconds(100),
                           [&] { return link.stop || !link.queued.empty(); });
      if (link.stop) break;
      while (!link.queued.empty() && outstanding.size() + sending.size() < kFileWindow) {
        sending.push_back(std::move(link.queued.front()));
        link.queued.pop_front();
      }
    }
    if (!sending.empty() && !channel) {
      auto opened = open_file_channel(rail, address, owner);
      if (!opened) {
        // The owner cannot be reached now: what waits for it fails too, instead of a connect per window.
        Error error(opened.error().code(),
                    "connecting to the owner at " + address + ": " + opened.error().message());
        for (auto& op : sending) file_op_failed(peer, op, error);
        std::deque<FileOp> rest;
        {
          std::lock_guard lock(link.mutex);
          rest.swap(link.queued);
        }
        for (auto& op : rest) file_op_failed(peer, op, error);
        continue;
      }
      channel = std::move(*opened);
    }
    for (std::size_t k = 0; k < sending.size(); ++k) {
      auto& op = sending[k];
      auto* region = op.region->by_rail[rail.index].get();
      FileRequestMessage request{.type = op.write ? kFileWrite : kFileRead,
                                 .id = next_id++,
                                 .offset = op.offset,
                                 .length = op.length,
                                 .dest_addr = op.local,
                                 .dest_rkey = region->descriptor().rkey,
                                 .dest_epoch = region->descriptor().owner_epoch,
                                 .name = op.segment};
      auto payload = encode_request(request);
      Result<void> sent =
          payload ? channel->post(request.type, *payload) : Result<void>(std::unexpected(payload.error()));
      if (!sent) {
        Error error(sent.error().code(), "sending the request: " + sent.error().message());
        fail_outstanding(error);
        for (std::size_t j = k; j < sending.size(); ++j) file_op_failed(peer, sending[j], error);
        break;
      }
      if (outstanding.empty()) last_heard = Clock::now();
      outstanding.emplace(request.id, std::move(op));
    }
    if (outstanding.empty()) continue;
    // Briefly: ops queued meanwhile are sent only when this returns (at most the window's worth wait).
    auto frame = channel->receive(std::chrono::microseconds(100));
    if (!frame && frame.error().code() == Errc::Timeout) {
      if (Clock::now() - last_heard > options_.peer_timeout)
        fail_outstanding(Error(Errc::Timeout, "the owner answered none of " +
                                                  std::to_string(outstanding.size()) +
                                                  " requests within peer_timeout (" +
                                                  std::to_string(options_.peer_timeout.count()) + " ms)"));
      continue;
    }
    if (!frame) {
      fail_outstanding(
          Error(frame.error().code(), "the connection to the owner failed: " + frame.error().message()));
      continue;
    }
    last_heard = Clock::now();
    auto reply = decode_reply(*frame);
    auto it = reply ? outstanding.find(reply->id) : outstanding.end();
    if (!reply || it == outstanding.end()) {
      fail_outstanding(
          reply ? Error(Errc::ProtocolError, "the owner answered request " + std::to_string(reply->id) +
                                                 ", which it was not asked")
                : reply.error(),
          false);
      continue;
    }
    if (reply->code == 0) {
      finish_file_op(peer, it->second, nullptr);
    } else {
      Error error(static_cast<Errc>(reply->code), "the owner refused: " + reply->message);
      finish_file_op(peer, it->second, &error);
    }
    outstanding.erase(it);
  }
  Error closed(Errc::ConnectionBroken,
               "the engine closed the connection to the owner with the request in flight");
  fail_outstanding(closed);
  std::deque<FileOp> rest;
  {
    std::lock_guard lock(link.mutex);
    rest.swap(link.queued);
  }
  for (auto& op : rest) finish_file_op(peer, op, &closed);
}

std::vector<FileGroup> EngineImpl::file_groups(
    const PreparedImpl& prepared, const std::shared_ptr<BatchImpl>& batch,
    const std::function<const std::shared_ptr<const SegmentEntry>&(std::uint32_t)>& entry_of) const {
  std::vector<FileGroup> groups;
  for (std::size_t k = 0; k < prepared.file_items.size(); ++k) {
    const auto& item = prepared.file_items[k];
    const auto& entry = entry_of(item.segment);
    auto group = std::ranges::find(groups, entry->peer.get(), &FileGroup::peer);
    if (group == groups.end()) group = groups.insert(groups.end(), FileGroup{entry->peer.get(), entry, {}});
    // Read here when we opened the owner's file and the destination is host memory (device memory goes to
    // the owner: the transport's device path lands the bytes there).
    auto read_locally = local_file_for(*entry, item.write, *prepared.file_regions[k]);
    for (std::uint64_t done = 0; done < item.length; done += kFileMessageBytes) {
      group->ops.push_back(FileOp{.batch = batch,
                                  .request = item.request,
                                  .write = item.write,
                                  .segment = entry->name,
                                  .owner = entry->record.owner,
                                  .region = prepared.file_regions[k],
                                  .offset = item.offset + done,
                                  .length = std::min(kFileMessageBytes, item.length - done),
                                  .local = item.local + done,
                                  .read_locally = read_locally,
                                  .handle = item.segment,
                                  .generation = entry->generation});
    }
  }
  return groups;
}

Result<void> EngineImpl::reserve_file_groups(const std::vector<FileGroup>& groups) {
  for (std::size_t g = 0; g < groups.size(); ++g) {
    auto n = static_cast<std::uint32_t>(groups[g].ops.size());
    if (n > groups[g].peer->credits.total())
      return fail(Errc::InvalidArgument,
                  "try_submit: " + std::to_string(n) + " file requests to '" + groups[g].peer->owner +
                      "' are more than max_inflight_per_peer " +
                      std::to_string(options_.max_inflight_per_peer) + " (use submit())");
    if (groups[g].peer->credits.try_take_exact(n)) continue;
    for (std::size_t j = 0; j < g; ++j)
      groups[j].peer->credits.release(static_cast<std::uint32_t>(groups[j].ops.size()));
    return fail(Errc::ResourceExhausted, "try_submit: would block: no room for " + std::to_string(n) +
                                             " file requests to '" + groups[g].peer->owner +
                                             "' now (max_inflight_per_peer " +
                                             std::to_string(options_.max_inflight_per_peer) + ")");
  }
  return {};
}

// One peer credit per message, as per work request: the in-flight bound covers file requests too, so what
// waits in a link's queue is bounded by max_inflight_per_peer.
void EngineImpl::queue_file_groups(std::vector<FileGroup> groups, bool reserved, Clock::time_point deadline) {
  for (auto& group : groups) {
    if (reserved) {
      queue_file_ops(*group.peer, *group.entry, std::move(group.ops));
      continue;
    }
    std::size_t next = 0;
    while (next < group.ops.size()) {
      auto left = static_cast<std::uint32_t>(group.ops.size() - next);
      auto granted = group.peer->credits.acquire(left, deadline);
      if (granted == 0) {
        Error busy(Errc::ResourceExhausted,
                   "busy: could not be sent within submit_timeout (max_inflight_per_peer " +
                       std::to_string(options_.max_inflight_per_peer) + ")");
        for (; next < group.ops.size(); ++next) {
          auto& op = group.ops[next];
          Error named(busy.code(), describe(op) + ": " + busy.message());
          op.batch->piece_done(op.request, &named);
        }
        break;
      }
      std::vector<FileOp> some(
          std::make_move_iterator(group.ops.begin() + static_cast<std::ptrdiff_t>(next)),
          std::make_move_iterator(group.ops.begin() + static_cast<std::ptrdiff_t>(next + granted)));
      next += granted;
      queue_file_ops(*group.peer, *group.entry, std::move(some));
    }
  }
}

}  // namespace rdmakit::xfer::detail
