// File segments: an owner publishes a regular file as a named segment (Engine::publish_file) and serves
// READs of byte ranges of it; a peer submits them as any request and gets one status per request.
//
// How the bytes travel: the requester sends one message per request piece (at most kFileMessageBytes) on a
// connection of its own to the owner, proven like the data connections (our identity carries
// kFileIdentitySuffix, so the owner opens its file channel on that connection only, after our proof
// verified; the owner must prove it is the record's owner). The message names the segment, the range and
// the destination: our registered memory's descriptor on that connection's rail. The owner reads the
// covering 4 KiB-aligned range with io_uring (O_DIRECT where the file system takes it) into a chunk of its
// ring, WRITEs the asked bytes into our memory (push), and once every WRITE of the piece completed (the
// bytes are in our memory) answers with the piece's status.
// A WRITE to a writable segment runs the other way: the descriptor names our source, the owner READs the
// bytes from it into a chunk (over the partial edge blocks it read first) and writes the file, and answers
// once the bytes are in the file (files_server.cpp).
//
// Why push and not pull with a lease (the owner answering where the chunk sits, the requester READing it
// and releasing it): a chunk is reused only after the owner's own WRITE completed, so no requester can ever
// read a chunk that was handed to someone else, where a lease that expired under a slow READ would give
// silently wrong bytes unless every release were confirmed (another round trip). Push is one message
// round trip per piece, and a requester that vanishes pins no chunk (its WRITE fails). Its cost is trust:
// the requester hands the owner a descriptor of its memory. The engine registers local memory with
// RemoteWrite on every rail anyway (it may be published), and the descriptor goes only to a peer that
// proved the job's secret and that it is the segment record's owner; a holder of the secret is trusted in
// this engine's model (docs/xfer.md, "Trust"), but such an owner could write anywhere in that
// registration, not only into the asked range. Pull would not give it that.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/message_channel.hpp"
#include "rdmakit/error.hpp"

namespace rdmakit::xfer::detail {

class BatchImpl;
struct LocalFile;
struct LocalRegion;
struct Rail;

// What a file connection's initiator appends to its engine name in the peer proof (the MAC binds it; no
// longer than kNotifyIdentitySuffix, so every engine name fits).
inline constexpr std::string_view kFileIdentitySuffix =
    "\x1f"
    "file";
// The longest piece one message asks for: a request longer than this travels as several messages.
inline constexpr std::uint64_t kFileMessageBytes = 4 << 20;
// Messages one connection may have at the owner unanswered: the owner keeps this many receives posted.
inline constexpr std::uint32_t kFileWindow = 16;

// The wire: types, and the frame spec of the file channel (core/message_channel.hpp).
enum : std::uint8_t { kFileRead = 1, kFileWrite = 2, kFileDone = 3 };
inline constexpr std::size_t kMaxFileSegmentName = 1024;
inline constexpr std::size_t kMaxFileReplyText = 2048;
extern const rdmakit::detail::FrameSpec kFileSpec;

// A request piece: read [offset, offset + length) of segment `name` into the requester's memory at
// `dest_addr` (rkey, epoch: its descriptor on the connection's rail), or write it from there.
struct FileRequestMessage {
  std::uint8_t type = kFileRead;
  std::uint64_t id = 0;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  std::uint64_t dest_addr = 0;
  std::uint32_t dest_rkey = 0;
  std::uint64_t dest_epoch = 0;
  std::string name;
};
// The owner's answer for piece `id`: code 0 when every byte is in the requester's memory (a WRITE: in the
// file), else an Errc
// and the reason (naming the file and the range).
struct FileReplyMessage {
  std::uint64_t id = 0;
  std::uint8_t code = 0;
  std::string message;
};
Result<std::vector<std::byte>> encode_request(const FileRequestMessage& request);
Result<FileRequestMessage> decode_request(const rdmakit::detail::Frame& frame);
Result<std::vector<std::byte>> encode_reply(const FileReplyMessage& reply);
Result<FileReplyMessage> decode_reply(const rdmakit::detail::Frame& frame);

// One piece of a request to a file segment, from submit() until the owner answered (or the link failed).
struct FileOp {
  std::shared_ptr<BatchImpl> batch;
  std::uint32_t request = 0;
  bool write = false;
  std::string segment;  // names only: an op never holds the segment entry (and so never the peer)
  std::string owner;
  std::shared_ptr<LocalRegion> region;  // kept registered while the owner may write into it
  std::uint64_t offset = 0;             // in the file
  std::uint64_t length = 0;
  std::uint64_t local = 0;  // address
  // A READ this process makes from the owner's file itself (files_local.hpp): that file, opened.
  std::shared_ptr<const LocalFile> read_locally;
  // For a retry after the connection to the owner failed: the segment's handle and the resolution the op
  // was queued against (a retry re-resolves only when nobody did since), the attempts made, and the
  // failure that started them with what each retry met (the final error names the cause, not only the last
  // retry's symptom).
  std::uint32_t handle = 0;
  std::uint64_t generation = 0;
  std::uint32_t attempts = 0;
  std::shared_ptr<const Error> first_failure;
  std::string later_failures;
};
// The op's request is done with this piece (`error`: it failed; the message gains what the op was); its
// peer's credit goes back.
struct Peer;
void finish_file_op(Peer& peer, FileOp& op, const Error* error);

// The requester's side of one peer's file connection: ops wait in `queued` (bounded by the peer's in-flight
// credits, taken at submit) until the link's thread sends them, at most kFileWindow unanswered.
struct FileLink {
  std::mutex mutex;
  std::condition_variable wake;
  std::deque<FileOp> queued;
  bool stop = false;
  std::thread thread;
};

// The owner's side (files_server.cpp): the published files, the chunk ring, the proven file connections,
// and the thread that serves them.
class FileServer;
struct PublishedFile;
// Allocates and registers the chunk ring on every rail and starts the serving thread.
Result<std::shared_ptr<FileServer>> start_file_server(std::vector<Rail*> rails, std::uint64_t chunk_bytes,
                                                      std::uint32_t chunks,
                                                      std::chrono::milliseconds peer_timeout);
// The server serves `file` under its name from now on.
void serve_file(FileServer& server, std::shared_ptr<PublishedFile> file);
// unpublish(): the server stops serving the name (requests in flight on it finish).
void unpublish_file(FileServer& server, std::string_view name);
// A proven file connection: the server takes its requests from now on.
void adopt_file_connection(FileServer& server, Rail& rail, std::shared_ptr<Connection> connection,
                           std::string identity, std::unique_ptr<rdmakit::detail::MessageChannel> channel);
// A file connection's channel, opened inside the proof once the peer's proof verified (so its first request
// finds a receive posted).
Result<std::unique_ptr<rdmakit::detail::MessageChannel>> open_file_server_channel(
    Context& context, std::shared_ptr<Connection> connection);

}  // namespace rdmakit::xfer::detail
