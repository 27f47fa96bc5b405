// The s3:// and http(s):// drivers: thin wrappers over the registered RemoteIo (s3_io.cc,
// http_io.cc) and, for deletes and listings that tell objects from prefixes, the s3://
// ObjectStore (object_store.hpp). The same requests the readers send, so the same retries,
// deadlines and errors.
#include <algorithm>
#include <cerrno>
#include <string>
#include <vector>

#include "shardload/io.hpp"
#include "shardload/location.hpp"
#include "shardload/storage.hpp"
#include "storage/detail/object_store.hpp"
#include "storage/detail/stores.hpp"

namespace shardload::detail {
namespace {

class RemoteStore final : public Store {
 public:
  RemoteStore(std::string base, std::string query, RemoteIo* io)
      : base_(std::move(base)), query_(std::move(query)), io_(io) {
    scheme_ = base_.substr(0, base_.find("://"));
    // Shown as it is: a password in the user part ("s3://AK:PASSWORD@B/P/") hidden too.
    shown_ = redact_secrets(base_);
  }

  [[nodiscard]] std::string_view scheme() const override { return scheme_; }
  [[nodiscard]] const std::string& location() const override { return shown_; }
  [[nodiscard]] std::string describe(std::string_view key) const override {
    return shown_ + std::string(key);
  }

  Result<KeyInfo> stat(std::string_view key) override {
    SHARDLOAD_RETURN_IF_ERROR(check_key(key));
    SHARDLOAD_ASSIGN_OR_RETURN(const FileInfo info, io_->stat_path(url(key)));
    return KeyInfo{info.size, generation_of(info)};
  }

  Result<std::size_t> read(std::string_view key, std::uint64_t offset, std::span<std::byte> dst,
                           std::string_view if_generation) override {
    SHARDLOAD_RETURN_IF_ERROR(check_key(key));
    const std::string u = url(key);
    FileInfo info;
    SHARDLOAD_ASSIGN_OR_RETURN(File file, File::open_stat(*io_, u, &info));
    if (!if_generation.empty() && generation_of(info) != if_generation) {
      return file_error(ErrorCode::kChanged, u,
                        "changed: generation " + generation_of(info) + ", expected " +
                            std::string(if_generation));
    }
    if (offset >= info.size || dst.empty()) return std::size_t{0};
    const std::size_t n =
        static_cast<std::size_t>(std::min<std::uint64_t>(dst.size(), info.size - offset));
    // read_exact: the backend's retries, and its word on a failed read in the message.
    SHARDLOAD_RETURN_IF_ERROR(file.read_exact(dst.data(), n, offset));
    return n;
  }

  Result<std::vector<std::string>> list(std::string_view prefix) override {
    SHARDLOAD_RETURN_IF_ERROR(detail::check_store_prefix(prefix));
    if (!prefix.empty()) SHARDLOAD_RETURN_IF_ERROR(check_key(prefix));
    const std::string dir = base_ + std::string(prefix) + query_;
    std::vector<std::string> keys;
    if (ObjectStore* const objects = object_store_for(dir); objects != nullptr) {
      SHARDLOAD_ASSIGN_OR_RETURN(const auto entries, objects->list_entries(dir));
      for (const ObjectEntry& e : entries) {
        keys.push_back(std::string(prefix) + e.name + (e.prefix ? "/" : ""));
      }
    } else {
      SHARDLOAD_ASSIGN_OR_RETURN(const auto names, io_->list(dir));
      for (const std::string& name : names) keys.push_back(std::string(prefix) + name);
    }
    return keys;
  }

  Status write(std::string_view key, std::span<const std::byte> data) override {
    SHARDLOAD_RETURN_IF_ERROR(check_key(key));
    const std::string u = url(key);
    SHARDLOAD_RETURN_IF_ERROR(check_object_key(u));
    return io_->write_object(u, data.data(), data.size());
  }

  Status remove(std::string_view key) override {
    SHARDLOAD_RETURN_IF_ERROR(check_key(key));
    const std::string u = url(key);
    ObjectStore* const objects = object_store_for(u);
    if (objects == nullptr) {
      return file_error(ErrorCode::kIo, u,
                        "this store cannot delete (" + scheme_ + " is read-only)", ENOTSUP);
    }
    SHARDLOAD_RETURN_IF_ERROR(check_object_key(u));
    return objects->remove(u);
  }

 private:
  // An s3:// key holding a '?' (where the URL's options begin) would reach another key:
  // refused, as a listing's or a manifest's names are (location.hpp). Over http(s) a key's
  // '%', '#' and '?' are percent-encoded in its URL instead (url_key).
  [[nodiscard]] Status check_key(std::string_view key) const {
    SHARDLOAD_RETURN_IF_ERROR(check_store_key(key));
    const std::string why = unnameable_key(base_, key);
    if (why.empty()) return Status::ok();
    return Status(ErrorCode::kInvalidArgument,
                  "store key '" + path_for_message(std::string(key)) + "': " + why);
  }

  [[nodiscard]] std::string url(std::string_view key) const {
    return base_ + url_key(base_, key) + query_;
  }

  std::string base_;   // "s3://B/P/": the prefix, ending in '/'
  std::string shown_;  // base_, its secrets hidden (location())
  std::string query_;  // "?endpoint_override=...", or ""
  std::string scheme_;
  RemoteIo* io_;
};

}  // namespace

Result<std::unique_ptr<Store>> make_remote_store(std::string_view location, RemoteIo* io) {
  const std::size_t q = location.find('?');
  std::string base(location.substr(0, q));
  std::string query(q == std::string_view::npos ? std::string_view() : location.substr(q));
  if (base.back() != '/') base.push_back('/');
  SHARDLOAD_RETURN_IF_ERROR(check_object_key(base + query));
  return std::unique_ptr<Store>(new RemoteStore(std::move(base), std::move(query), io));
}

}  // namespace shardload::detail
