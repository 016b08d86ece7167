// Publishing files as file segments (publish_file; publish_directory in directory.cpp): the file opened and
// checked (files_open.hpp), the owner's file server started with the first one (files_server.cpp), the
// sealed record naming no memory of ours (and, unless the owner says not, the file's path and inode for
// requesters on this host: files_local.hpp).
#include <fcntl.h>

#include "xfer/engine/engine_impl.hpp"
#include "xfer/engine/files_open.hpp"

namespace rdmakit::xfer::detail {

using rdmakit::detail::MessageChannel;

std::shared_ptr<FileServer> EngineImpl::file_server() const {
  std::lock_guard lock(files_mutex_);
  return file_server_;
}

#if RDMAKIT_XFER_FILES

void EngineImpl::adopt_file_connection(Rail& rail, std::shared_ptr<Connection> connection,
                                       std::string identity, std::unique_ptr<MessageChannel> channel) {
  auto server = file_server();
  if (!server) return connection->close();
  detail::adopt_file_connection(*server, rail, std::move(connection), std::move(identity),
                                std::move(channel));
}

Result<void> EngineImpl::publish_file(std::string_view name, const std::string& path,
                                      const FileSegmentOptions& options) {
  return publish_file_at(AT_FDCWD, path, false, name, path, options);
}

Result<void> EngineImpl::publish_file_at(int dir, const std::string& entry, bool no_follow,
                                         std::string_view name, const std::string& path,
                                         const FileSegmentOptions& options) {
  if (name.empty()) return fail(Errc::InvalidArgument, "publish_file: empty segment name");
  if (name.size() > kMaxFileSegmentName)
    return fail(Errc::InvalidArgument,
                "publish_file: a segment name longer than " + std::to_string(kMaxFileSegmentName) + " bytes");
  if (options.sync_writes && !options.writable)
    return fail(Errc::InvalidArgument,
                "publish_file '" + std::string(name) + "': sync_writes is for writable segments only");
  if (options_.file_chunk_bytes == 0 || options_.file_chunk_bytes % 4096 != 0 ||
      options_.file_chunk_bytes > (1u << 30) || options_.file_ring_chunks == 0 ||
      options_.file_ring_chunks > 256)
    return fail(Errc::InvalidArgument,
                "publish_file: file_chunk_bytes must be a multiple of 4096 up to 1 GiB and "
                "file_ring_chunks 1..256");
  auto file = std::make_shared<PublishedFile>();
  file->name = std::string(name);
  file->path = path;
  file->writable = options.writable;
  if (auto opened =
          open_published(*file, dir, entry, no_follow, options.sync_writes, options.allow_other_writers);
      !opened)
    return opened;

  std::lock_guard lock(control_);
  if (published_.contains(name) || published_files_.contains(name) || unready_.contains(name))
    return fail(Errc::InvalidArgument, "publish_file: segment '" + file->name + "' is already published");
  std::shared_ptr<FileServer> server = file_server();
  if (!server) {
    std::vector<Rail*> rails;
    for (auto& rail : rails_) rails.push_back(rail.get());
    auto made = start_file_server(std::move(rails), options_.file_chunk_bytes, options_.file_ring_chunks,
                                  options_.peer_timeout);
    if (!made)
      return std::unexpected(Error(made.error().code(),
                                   "publish_file: the file server: " + made.error().message(),
                                   made.error().sys_errno()));
    std::lock_guard files(files_mutex_);
    file_server_ = server = std::move(*made);
  }
  // Its rails name no memory: only the owner's epoch in that rail's context (which keys the peer), so a
  // reader can reach nothing of ours through them.
  SegmentRecord record{options_.name, host_, file->size, {}, true, file->writable};
  if (options.offer_local_reads) {
    record.path = file->absolute_path;
    record.device = file->device;
    record.inode = file->inode;
  }
  for (auto& rail : rails_) {
    RemoteRegion region{};
    region.owner_epoch = rail->context->identity().epoch;
    record.rails.push_back({rail->transport, rail->listener->address(), region});
  }
  auto sealed = seal(record, name, secret_);
  if (!sealed) return std::unexpected(sealed.error());
  serve_file(*server, file);  // before the name is visible: a peer that finds it is served
  if (auto put = metadata_.publish(segment_key(name), *sealed); !put) {
    unpublish_file(*server, name);
    return put;
  }
  published_files_.emplace(name);
  std::lock_guard names(notifications_mutex_);
  ready_names_.emplace(name);
  return {};
}

#else  // built without io_uring (RDMAKIT_WITH_CKPT off)

void EngineImpl::adopt_file_connection(Rail&, std::shared_ptr<Connection> connection, std::string,
                                       std::unique_ptr<MessageChannel>) {
  connection->close();
}

Result<void> EngineImpl::publish_file(std::string_view name, const std::string&, const FileSegmentOptions&) {
  return fail(Errc::NotSupported, "publish_file '" + std::string(name) +
                                      "': this rdmakit was built without io_uring (RDMAKIT_WITH_CKPT off)");
}

Result<void> EngineImpl::publish_file_at(int, const std::string& path, bool, std::string_view name,
                                         const std::string&, const FileSegmentOptions& options) {
  return publish_file(name, path, options);
}

#endif

}  // namespace rdmakit::xfer::detail
