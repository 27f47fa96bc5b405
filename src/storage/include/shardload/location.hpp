// What the store behind a path is like. The readers, the engine and the front ends name data by
// path (a local path, "s3://bucket/key?options", "https://host/key"). Every decision that
// depends on where the bytes live (what a request costs, how names join, whether a directory
// can be listed or written, what a snapshot's inode means, how a change reads in a message)
// asks the storage layer here instead of testing the path's scheme, so that a new store driver
// answers these questions in src/storage (its row in location.cc) and changes no reader.
//
// Contract: pure functions of the path's text; nothing is opened or asked of a store. Safe
// from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "shardload/io.hpp"

namespace shardload {

struct PathTraits {
  // The operating system's file calls reach the path: stat, opendir, mkdir, a temporary file
  // renamed into place, and a library that opens other files by name (HDF5's external and
  // virtual-dataset sources) finds them beside it. false: the path is reached only through
  // the registered backend (posix_io() routes it), by keys.
  bool kernel_files = true;
  // Each open, stat and read is a request over the network, not a system call: ask a key's
  // state once (open with the snapshot discovery took, and compare after the reads), fetch a
  // small object whole or a footer with the open, read ahead in large windows, keep several
  // requests in flight, and keep nothing open between reads.
  bool round_trips = false;
  // Keys live in a flat name space: a "directory" is a prefix that exists only through the
  // keys below it (nothing to stat; listing it lists every key under it, however deep), and an
  // open that finds nothing (ENOENT) is a missing key.
  bool flat_keys = false;
  // A directory can be listed (false: an HTTP server has no listing; a manifest names the
  // objects).
  bool listable = true;
  // Keys can be written (a manifest, a save).
  bool writable = true;
  // Written by uploading whole objects (no rename, no positional write into an object): save
  // takes its object pipeline, a manifest is one upload.
  bool uploads = false;
  // A snapshot's inode is the file's own number, so that another inode at the same size is
  // another file put at the path. false: it is a hash of the object's ETag, which changes with
  // the bytes, and the snapshot has no times.
  bool inode_is_identity = true;
  // A '?' in the path begins the store's options (a URL's query), so no key named in it can
  // hold one; false: a '?' is part of a file name.
  bool options_in_query = false;
  // The characters a key cannot hold to be named by a path of this store: '?', where an
  // s3:// URL's options begin. "" where a name may hold any of them (over HTTP a key's '%',
  // '#' and '?' are percent-encoded in its URL instead: url_key).
  std::string_view key_delimiters;
  // A key is put into a URL percent-encoded where it holds '%', '#', '?', a space, a control or
  // a byte past ASCII (HTTP: the server decodes the path, and would take "a%2Fb" as "a/b", a
  // '#' as the fragment, never sent, and a '?' as the query; the others are no URL's).
  bool encoded_keys = false;
  // A '#' in the path begins the URL's fragment, which no request sends (RFC 3986, libcurl):
  // the object asked for would be the one named up to the '#', another than the one written.
  bool fragment_cut = false;
  // The scheme as messages name it ("s3://", "http(s)://"); "" for a local path.
  std::string_view scheme_label;
  // The rows of the store option table a URL of this store takes from its query
  // (StoreOptionSpec::stores: kStoreS3, kStoreHttp of shardload/store_options.hpp); 0: none
  // (a local path, and a store driver's scheme, whose driver reads its own options).
  std::uint32_t option_rows = 0;
  // An item of the query that is none of those rows is sent with every request (an http(s)
  // URL's query is the server's), so options may join such a query only as those rows; false:
  // the whole query is the store's, which refuses an item it does not know, naming the URL.
  bool query_sent = false;
};

// The traits of the store that serves `path`.
PathTraits path_traits(std::string_view path);

// "s3://...", "http://..." and "https://...": the URLs the remote backends serve. The
// scheme predicates are this layer's (and the command line's argument parsing): everything
// else asks path_traits what it needs to know (tools/check_includes.py holds it to that).
bool is_remote_url(std::string_view path);
// The scheme of a URL no backend serves ("gs" of "gs://b/k", "file" of "file:///d"), or ""
// where `path` is no such URL (a served scheme, a local path without "SCHEME://"). A name
// so spelled would otherwise be taken as a local relative path ("./gs:/b/k").
std::string unsupported_scheme(std::string_view path);
// `path` with its scheme in lower case where that spelling is a URL a backend serves
// ("s3://b/k" of "S3://b/k", "https://h/x" of "HTTPS://h/x"), for a refusal of the other
// spelling to say what to write; "" where it is no such URL. Schemes are matched as written:
// every layer (and Python) tells a URL by its lower-case prefix.
std::string lower_case_scheme(std::string_view path);
// `path` as the URL it was meant to be where it spells a served scheme (in any case) followed
// by a ':' and other than two '/' ("http:/user:pw@host/x.npy", "http:\\h/x", "http:/\/h/x",
// "http:h/x", "S3:/b/d/"): "http://user:pw@host/x.npy", "s3://b/d/"; "" where it does not (a
// URL a backend serves, "http:///h/x" among them, is no mistyped one).
// Taken as a local path, such a name would fail as "not found" (printing its user part as a
// path), or be written to as "./http:/...".
std::string mistyped_url(std::string_view path);
// `text` (which mistyped_url() took for `url`) and `url` as a refusal may show them. Where
// what follows the scheme's ':' and its slashes starts a host or a user name, redaction finds
// the user part in `url` and the two come back as they are; other text there ("http: //",
// "https:.//", "http:://") would hide the user part from redaction, so everything from the
// ':' to the last '@' is shown as "***" instead.
std::pair<std::string, std::string> mistyped_url_shown(std::string_view text,
                                                       const std::string& url);
// "http://..." and "https://...": the URLs the HTTP backend serves (no listing, no globs).
bool is_http_url(std::string_view path);
// The backend that serves `url` (by its scheme), or nullptr when this build has none.
RemoteIo* remote_io_for(std::string_view url);

// What names the directory holding `path`, for telling which shards lie side by side (a raw
// sidecar's, a shard's position among its directory's): the path up to its last '/' ("."
// without one), and a URL's query after it, which is the store's options and not part of
// the directory's name but tells two stores apart.
std::string directory_key(std::string_view path);

// `path`'s name and its store options apart. A URL's query configures its store and is no
// part of the key ("s3://b/k?region=x" -> {"s3://b/k", "?region=x"}); a local path has no
// options (a '?' in it is part of a file name): {path, ""}. Both come back with their secrets
// sealed (seal_credentials: "credentials=HANDLE" for s3's secret_key and session_token, for an
// http(s) URL's user part and its query's secrets), as every path resolved from a source
// holds them.
std::pair<std::string, std::string> split_options(std::string_view path);

// `name` in the directory `dir`: `name` alone when `dir` is empty, else one '/' between them
// (none added where `dir` ends in one), and a URL's options kept at the end, after the key.
std::string join_key(std::string_view dir, std::string_view name);

// Why `key` cannot be named in the store that serves `location` ("" where it can): it holds
// one of the store's key_delimiters, so a URL made of it would reach another key ("an object
// whose key holds '?' cannot be named by an s3:// URL (its query begins at the first '?')").
// The one check of a key a listing, a manifest or a Store caller gives.
std::string unnameable_key(std::string_view location, std::string_view key);

// Why `path` cannot name what it spells ("" where it can): an http(s) URL holding a '#',
// whose fragment no request sends, so "https://h/a#1.npy" would read the object "a" (a
// user who means a '#' of the name writes it %23). Stripping the fragment, as a browser does,
// would read another object than the one written; an s3:// key may hold '#' (it is sent).
// Or an http(s) URL whose host is empty ("http:///u:p@h/x"), which libcurl reads as
// "http://u:p@h/x" where every other reader of the URL sees no host.
std::string unsendable_url(std::string_view path);

// `key` as a URL of the store that serves `location` names it: over http(s) its '%', '#' and
// '?' percent-encoded ("q%2Fx.npy" as "q%252Fx.npy"), and so every byte a URL's path cannot
// hold as it is (a space, a control, a byte past ASCII: "a b.npy" as "a%20b.npy"), so that
// the server, which decodes the path, looks up the key itself; elsewhere `key` as it is.
std::string url_key(std::string_view location, std::string_view key);

// `text` with each byte that `keep` refuses written as "%XX" (upper-case hex digits).
std::string percent_encode(std::string_view text, bool (*keep)(unsigned char));

// The fields in which `now` differs from `then` ("size 10 -> 8 bytes, mtime ... -> ... ns,
// ..."), or "" when the snapshots are equal.
std::string snapshot_difference(const FileInfo& then, const FileInfo& now);
// The same for the file at `path`, in the terms of its store: an object's snapshot has no
// times, so its size and the hash of its ETag say what changed ("size 10 -> 10 bytes,
// overwritten (its ETag differs)").
std::string snapshot_difference(std::string_view path, const FileInfo& then, const FileInfo& now);

}  // namespace shardload
