// open_store and what every driver shares: the key check and generations.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <string>

#include "shardload/io.hpp"
#include "shardload/location.hpp"
#include "shardload/storage.hpp"
#include "storage/detail/store_schemes.hpp"
#include "storage/detail/stores.hpp"

namespace shardload {

Status check_store_key(std::string_view key) {
  const auto refuse = [&key](const std::string& why) {
    return Status(ErrorCode::kInvalidArgument,
                  "store key '" + path_for_message(std::string(key)) + "': " + why);
  };
  if (key.empty()) return refuse("empty; name a key below the store's location");
  if (key.find('\0') != std::string_view::npos) return refuse("holds a NUL character");
  if (key.front() == '/') {
    return refuse("starts with '/'; a key is relative to the store's location");
  }
  // A "." or ".." segment would reach another key than the one named (or one outside the
  // location, "../x"), and an empty one another path than the one a listing gives.
  for (std::size_t at = 0; at <= key.size();) {
    const std::size_t slash = std::min(key.find('/', at), key.size());
    const std::string_view segment = key.substr(at, slash - at);
    if (segment == "." || segment == "..") {
      return refuse("holds a '" + std::string(segment) + "' segment");
    }
    if (segment.empty() && slash != key.size()) return refuse("holds an empty segment ('//')");
    at = slash + 1;
  }
  return Status::ok();
}

namespace {

// A store that cannot write cannot publish: refused before anything is made.
Status cannot_publish(const Store& store, std::string_view name) {
  return file_error(
      ErrorCode::kIo, store.describe(name),
      "this store cannot publish a save (" + std::string(store.scheme()) + " is read-only)",
      ENOTSUP);
}

}  // namespace

Result<Staging> Store::stage(std::string_view name, const PublishSteps& /*steps*/) {
  return cannot_publish(*this, name);
}

Status Store::publish(const Staging& staging, const PublishSteps& /*steps*/, bool* published) {
  *published = false;
  return cannot_publish(*this, staging.name);
}

void Store::discard(const Staging& /*staging*/, const PublishSteps& /*steps*/) noexcept {}

namespace detail {

Status check_store_prefix(std::string_view prefix) {
  if (prefix.empty()) return Status::ok();
  if (prefix.back() != '/') {
    return Status(
        ErrorCode::kInvalidArgument,
        "store prefix '" + path_for_message(std::string(prefix)) + "': a prefix ends in '/'");
  }
  return check_store_key(prefix.substr(0, prefix.size() - 1));
}

}  // namespace detail

Result<std::unique_ptr<Store>> open_store(std::string_view location) {
  if (location.empty()) {
    return Status(ErrorCode::kInvalidArgument, "store location: empty; name a directory or a URL");
  }
  // A registered scheme: a store driver's, or a built-in driver's over its RemoteIo.
  if (const detail::SchemeRow* row = detail::registered_row(location); row != nullptr) {
    if (detail::is_store_scheme(location)) return detail::open_registered_store(location);
    RemoteIo* const io = row->transport != nullptr ? row->transport() : nullptr;
    if (io == nullptr) {
      return file_error(ErrorCode::kInvalidArgument, std::string(location), row->missing, ENOTSUP);
    }
    return detail::make_remote_store(location, io);
  }
  if (location.find("://") != std::string_view::npos && !location.starts_with("file://")) {
    return file_error(ErrorCode::kInvalidArgument, std::string(location),
                      "no store driver for this scheme (a directory, file://, s3://, http:// or "
                      "https://)");
  }
  if (location.starts_with("file://")) location.remove_prefix(7);
  if (location.empty()) {
    return Status(ErrorCode::kInvalidArgument, "store location 'file://': names no directory");
  }
  if (location.find('\0') != std::string_view::npos) {
    return Status(ErrorCode::kInvalidArgument,
                  path_for_message(std::string(location)) + ": the path holds a NUL character");
  }
  return detail::make_local_store(std::string(location));
}

Result<StorePlace> store_place(std::string_view location) {
  const std::size_t q = location.find('?');
  const std::string_view url = location.substr(0, q);
  const std::size_t mark = url.find("://");
  if (mark == std::string_view::npos || mark == 0 || url.starts_with("file://")) {
    return file_error(ErrorCode::kInvalidArgument, std::string(location),
                      "not the URL of a store (SCHEME://AUTHORITY/KEY)");
  }
  const std::string_view scheme = url.substr(0, mark);
  const std::size_t key_at = std::min(url.find('/', mark + 3), url.size());
  if (key_at == mark + 3) {
    return file_error(ErrorCode::kInvalidArgument, std::string(location),
                      scheme == "s3" ? "the URL names no bucket" : "the URL names no authority");
  }
  std::string_view key = url.substr(std::min(key_at + 1, url.size()));
  // One '/' ends a prefix; more is an empty segment, which names another key than the prefix
  // ("d//x" is not "d/x"), as everywhere else (check_store_key): taken for the prefix it would
  // write and replace what lies under "d/", and its own URL would read none of it.
  if (key.ends_with("//") || key == "/") {
    return file_error(ErrorCode::kInvalidArgument, std::string(location),
                      "the URL ends in an empty segment ('//'); name the prefix with one '/'");
  }
  if (!key.empty() && key.back() == '/') key.remove_suffix(1);
  const std::string root(url.substr(0, key_at));  // "SCHEME://AUTHORITY"
  StorePlace place;
  place.query = q == std::string_view::npos ? std::string() : std::string(location.substr(q));
  place.location = root + "/" + std::string(key) + (key.empty() ? "" : "/");
  if (!key.empty()) {
    const std::size_t leaf = key.rfind('/');
    place.name = std::string(leaf == std::string_view::npos ? key : key.substr(leaf + 1));
    place.parent =
        root + "/" +
        std::string(leaf == std::string_view::npos ? std::string_view() : key.substr(0, leaf + 1)) +
        place.query;
  }
  return place;
}

namespace detail {

Status check_within_key(const std::string& shown, std::uint64_t offset, std::size_t n,
                        std::uint64_t size) {
  if (offset <= size && n <= size - offset) return Status::ok();
  return file_error(ErrorCode::kInvalidArgument, shown,
                    "write of " + std::to_string(n) + " bytes at offset " + std::to_string(offset) +
                        " passes the key's size of " + std::to_string(size) + " bytes",
                    EINVAL);
}

std::string generation_of(const FileInfo& info) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%llx.%llx.%llx.%llx", static_cast<unsigned long long>(info.size),
                static_cast<unsigned long long>(info.mtime_ns),
                static_cast<unsigned long long>(info.ctime_ns),
                static_cast<unsigned long long>(info.inode));
  return buf;
}

}  // namespace detail
}  // namespace shardload
