// s3:// requests signed here (AWS Signature Version 4) and sent through libcurl, used by s3_io.cc
// where the credentials and region are known without the AWS SDK: reads, deletes and
// single-PUT uploads. A GET says what Arrow's S3
// file system cannot: the object's size (Content-Range) and ETag with its bytes, so an object
// costs one GET at discovery instead of a HEAD and a GET, and each ranged GET of a load is
// checked against the snapshot's ETag instead of a HEAD after the reads.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "shardload/io.hpp"
#include "shardload/status.hpp"
#include "storage/detail/aws_credentials.hpp"
#include "storage/detail/context.hpp"
#include "storage/detail/sigv4.hpp"
#include "storage/detail/store_options.hpp"

namespace shardload::detail {

// How to reach one bucket with requests signed here.
struct S3Endpoint {
  std::string origin;       // "scheme://host[:port]"
  std::string host;         // the Host header, as signed
  std::string path_prefix;  // "[/endpoint path]/bucket" (path-style) or "" (virtual-hosted)
  std::string region;
  // The region came from the options' `region`. Otherwise (the environment, the config file,
  // the bucket's HEAD) Arrow's client for the bucket is given it too: left without one, it
  // would send a HeadBucket of its own to find it, outside the retries and the deadline.
  bool region_in_options = false;
  bool anonymous = false;  // unsigned requests
  AwsCredentials creds;
  // Credentials of a role (a container's or an instance's), fetched again as they expire:
  // these sign instead of `creds` where set.
  std::shared_ptr<RoleCredentials> role;
  StoreOptions options;
  // The store's resources in the storage context (its limit on requests in flight), set by
  // the driver once the endpoint is made; every request for a key of the bucket holds a slot.
  std::shared_ptr<StoreResources> store;
};

// The credentials an s3:// store is signed with, found as the AWS SDK's default chain finds
// them: the options' key pair; AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (with
// AWS_SESSION_TOKEN); the shared credentials file's profile holding a key pair only; the
// config file profile's credential_process (run here: process_credentials()); else, where
// neither file's profile names a source of its own and no web identity is set, a container's
// or an instance's role. Those found here are handed to Arrow's client too (explicit keys),
// so the SDK's chain never fetches the same source again on its own terms (it follows a
// container endpoint's redirects). `sdk_only`: only the AWS SDK's chain resolves them (SSO,
// role_arn, web identity, a credentials-file profile holding more than keys), or none was
// found; Arrow's client then asks its chain, as before. Anonymous options: neither.
struct S3Credentials {
  bool sdk_only = false;
  AwsCredentials creds;                   // where `role` is null
  std::shared_ptr<RoleCredentials> role;  // a role's or a credential_process's, refreshed
  std::string where;                      // where `creds` came from, as an error names it
};
// kInvalidArgument naming `url` where a source the environment or the config file names
// gave none (a container endpoint refused, or answering with none; a credential_process that
// failed, or whose output holds a control character): the load stops there.
Result<S3Credentials> s3_credentials(const std::string& url, const StoreOptions& options);

// The endpoint for `bucket` with the store options left in `store_query` ("?k=v&..." or "",
// shardload's own keys taken out into `options`, credentials included), or nullopt where only
// the AWS SDK knows how to sign or reach the bucket (`credentials` sdk_only and not
// anonymous; an
// option of Arrow's other than endpoint_override, scheme and region; no region known and AWS
// not saying the bucket's): those stay on Arrow's path. The region: the options', else
// AWS_REGION, AWS_DEFAULT_REGION, the shared config file profile's, else the bucket's own as
// an unsigned HEAD of the bucket answers it (x-amz-bucket-region; us-east-1 from a server
// named by an endpoint that does not say), asked once per endpoint and bucket in a process.
std::optional<S3Endpoint> s3_signed_endpoint(const std::string& bucket,
                                             const std::string& store_query,
                                             const StoreOptions& options,
                                             const S3Credentials& credentials);

// What an answer said of the object: its size (a 206's Content-Range total, a 200's length,
// a HEAD's Content-Length; 0 with has_size false when it did not say) and its ETag's hash
// (FileInfo::inode; has_etag false when it sent none).
struct S3State {
  std::uint64_t size = 0;
  std::uint64_t inode = 0;
  bool has_size = false;
  bool has_etag = false;
  // Its Last-Modified and Date (FileInfo::modified_s, answered_s; 0 where it sent none).
  std::int64_t modified_s = 0;
  std::int64_t answered_s = 0;
};

// One ranged GET of [offset, offset + n) of `key` into `dst`, retried while transient.
// `expect_inode` (with `expect`): an answer whose ETag hash differs is refused before any of
// its body is kept (`changed`). `got`: the bytes read or -errno, with the store's words in
// `why` (S3's XML error Code and Message where it sent them). `status`: the HTTP answer (0 for
// a transfer that failed).
struct S3Get {
  std::int64_t got = 0;
  std::string why;
  long status = 0;
  bool changed = false;
  S3State state;
  std::uint64_t first = 0;  // the object offset of the bytes read
};
S3Get s3_get_range(const S3Endpoint& ep, const std::string& key, void* dst, std::size_t n,
                   std::uint64_t offset, bool expect, std::uint64_t expect_inode,
                   std::atomic<std::uint64_t>* retries);

// The same for the object's last `n` bytes (all of it when smaller): `first` says where they
// begin. An empty object answers 416, as for s3_get_range at offset 0.
S3Get s3_get_tail(const S3Endpoint& ep, const std::string& key, void* dst, std::size_t n,
                  std::atomic<std::uint64_t>* retries);

// One HEAD of `key`: the object's snapshot (kIo naming `url` when it fails; ENOENT for 404).
// `etag`, where given, gets the answer's ETag as sent ("" for none).
Result<FileInfo> s3_head(const S3Endpoint& ep, const std::string& url, const std::string& key,
                         std::atomic<std::uint64_t>* retries, std::string* etag = nullptr);

// One DELETE of `key`: ok when the store deleted it or it was not there (S3 answers 204 for
// both); kIo naming `url` otherwise. Unlike Arrow's delete, it leaves no empty "directory"
// marker object behind for the prefix the key was in.
Status s3_delete(const S3Endpoint& ep, const std::string& url, const std::string& key,
                 std::atomic<std::uint64_t>* retries);

// One PUT of `n` bytes at `data` as the object `key`, retried while transient (the whole body
// again): ok once the store answers 2xx, when the object is there whole; kIo naming `url`
// otherwise. S3 makes an object visible only when its PUT completes, so a PUT cut short
// leaves no object, and none of part of the bytes. `etag`, where given, gets the ETag the
// store answered the PUT with ("" for none).
Status s3_put(const S3Endpoint& ep, const std::string& url, const std::string& key,
              const void* data, std::size_t n, std::atomic<std::uint64_t>* retries,
              std::string* etag = nullptr);

}  // namespace shardload::detail
