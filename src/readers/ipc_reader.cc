// What only the Arrow IPC (Feather v2) side of the reader needs (arrow_reader.cc has the
// steps both formats share): opening a file, an object's footer read by its last bytes, the
// IPC reader over a file, the batches' rows from their metadata alone, and reading a remote
// object's batches with their fetches ahead of the interleave.
#include <arrow/api.h>
#include <arrow/extension_type.h>
#include <arrow/io/file.h>
#include <arrow/io/interfaces.h>
#include <arrow/ipc/reader.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "readers/detail/arrow_reader.hpp"
#include "readers/detail/ipc_file.hpp"
#include "storage/detail/fetch_ahead.hpp"
#include "storage/detail/store_options.hpp"

namespace shardload::detail {

Result<std::shared_ptr<IpcTail>> ArrowReader::read_ipc_tail(const std::string& path,
                                                            IoRandomAccessFile& file) {
  constexpr std::int64_t kMinFile = 8 + 10;  // leading magic and padding, length and magic
  const auto size = *file.GetSize();
  if (size < kMinFile) {
    return Status(ErrorCode::kFormat, path + ": not a readable Arrow IPC file (Feather v2): " +
                                          std::to_string(size) + " bytes");
  }
  const auto read = [&](std::int64_t at, std::int64_t n) -> Result<std::shared_ptr<arrow::Buffer>> {
    auto buf = file.ReadAt(at, n);
    if (!buf.ok()) return arrow_error(path, buf.status(), ErrorCode::kIo);
    if ((*buf)->size() != n) {
      return Status(ErrorCode::kIo, path + ": read " + std::to_string((*buf)->size()) +
                                        " bytes at " + std::to_string(at) + ", expected " +
                                        std::to_string(n));
    }
    return *std::move(buf);
  };
  const std::int64_t first = std::min(size, static_cast<std::int64_t>(kFooterReadBytes));
  SHARDLOAD_ASSIGN_OR_RETURN(std::shared_ptr<arrow::Buffer> last, read(size - first, first));
  const auto bytes = [](const arrow::Buffer& b, std::int64_t at, std::int64_t n) {
    return std::span<const std::byte>(reinterpret_cast<const std::byte*>(b.data()) + at,
                                      static_cast<std::size_t>(n));
  };
  SHARDLOAD_ASSIGN_OR_RETURN(const std::int64_t len,
                             ipc_footer_length(path, bytes(*last, first - 10, 10)));
  if (len > size - kMinFile) {
    return Status(ErrorCode::kFormat, path +
                                          ": not a readable Arrow IPC file (Feather v2): "
                                          "a footer of " +
                                          std::to_string(len) + " bytes in a file of " +
                                          std::to_string(size));
  }
  auto tail = std::make_shared<IpcTail>();
  tail->at = size - 10 - len;
  if (len + 10 <= first) {
    // A copy of the footer's bytes alone: a cache entry holds no more than it counts.
    auto own = arrow::AllocateBuffer(len + 10);
    if (!own.ok()) return arrow_error(path, own.status(), ErrorCode::kIo);
    std::memcpy((*own)->mutable_data(), last->data() + (first - 10 - len),
                static_cast<std::size_t>(len + 10));
    tail->bytes = *std::move(own);
  } else {
    SHARDLOAD_ASSIGN_OR_RETURN(tail->bytes, read(tail->at, len + 10));
  }
  SHARDLOAD_ASSIGN_OR_RETURN(tail->batches,
                             parse_ipc_footer(path, bytes(*tail->bytes, 0, len), size));
  return tail;
}

Result<OpenFile> ArrowReader::open_ipc(const std::string& path,
                                       std::shared_ptr<arrow::io::RandomAccessFile> file,
                                       const std::vector<int>& projection) {
  OpenFile f;
  auto opts = arrow::ipc::IpcReadOptions::Defaults();
  opts.use_threads = false;
  opts.included_fields = projection;
  auto reader = arrow::ipc::RecordBatchFileReader::Open(file, opts);
  if (!reader.ok()) {
    // A read the key's store failed is that, not a file Arrow could not read.
    if (read_failure(reader.status()) != nullptr) {
      return arrow_error(path, reader.status(), ErrorCode::kIo);
    }
    return Status(ErrorCode::kFormat, path + ": not a readable Arrow IPC file (Feather v2): " +
                                          reader.status().ToString());
  }
  f.ipc = *reader;
  f.schema = f.ipc->schema();
  f.file = std::move(file);
  return f;
}

namespace {

// Where each top-level column's field node is among a record batch's (parse_ipc_batch_rows).
std::vector<std::size_t> schema_top_nodes(const arrow::Schema& schema) {
  // A field's nodes: its own, then its children's, depth first; an extension type's are its
  // storage type's, a dictionary's its indices' alone.
  const std::function<std::size_t(const arrow::DataType&)> count =
      [&](const arrow::DataType& type) -> std::size_t {
    const arrow::DataType& t = type.id() == arrow::Type::EXTENSION
                                   ? *static_cast<const arrow::ExtensionType&>(type).storage_type()
                                   : type;
    std::size_t n = 1;
    for (const auto& child : t.fields()) n += count(*child->type());
    return n;
  };
  std::vector<std::size_t> top;
  std::size_t next = 0;
  for (const auto& field : schema.fields()) {
    top.push_back(next);
    next += count(*field->type());
  }
  return top;
}

}  // namespace

Result<std::vector<std::int64_t>> ArrowReader::remote_batch_rows(const std::string& path,
                                                                 const OpenFile& f) {
  constexpr std::int64_t kMetadataGap = std::int64_t{64} << 10;
  constexpr std::int64_t kMetadataSpan = std::int64_t{4} << 20;
  const std::vector<IpcBlock>& blocks = f.tail->batches;
  struct Span {
    std::size_t a, b;  // blocks [a, b)
    std::int64_t lo, hi;
  };
  std::vector<Span> spans;
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const IpcBlock& k = blocks[i];
    if (!spans.empty()) {
      Span& last = spans.back();
      if (k.offset >= last.hi && k.offset - last.hi <= kMetadataGap &&
          k.offset + k.metadata - last.lo <= kMetadataSpan) {
        last.b = i + 1;
        last.hi = k.offset + k.metadata;
        continue;
      }
    }
    spans.push_back({i, i + 1, k.offset, k.offset + k.metadata});
  }
  std::vector<std::int64_t> rows(blocks.size(), 0);
  const std::vector<std::size_t> top_nodes = schema_top_nodes(*f.schema);
  // A store's key carries no query: a '?' in it is part of its name.
  std::size_t in_flight = static_cast<std::size_t>(StoreOptions{}.chunks_in_flight);
  if (ctx_.source->traits(path).options_in_query) {
    SHARDLOAD_ASSIGN_OR_RETURN(in_flight, chunks_in_flight_of(path));
  }
  const Status st = fetch_ahead(
      spans.size(), in_flight, kRemoteIpcWindowBytes,
      [&](std::size_t i) -> Result<std::uint64_t> {
        const Span& sp = spans[i];
        auto buf = f.remote->ReadAt(sp.lo, sp.hi - sp.lo);
        if (!buf.ok()) return arrow_error(path, buf.status(), ErrorCode::kIo);
        if ((*buf)->size() != sp.hi - sp.lo) {
          return Status(ErrorCode::kIo, path + ": record batch metadata at " +
                                            std::to_string(sp.lo) + " came back short");
        }
        for (std::size_t b = sp.a; b < sp.b; ++b) {
          const auto* at =
              reinterpret_cast<const std::byte*>((*buf)->data()) + (blocks[b].offset - sp.lo);
          SHARDLOAD_ASSIGN_OR_RETURN(
              rows[b],
              parse_ipc_batch_rows(path + ": record batch " + std::to_string(b),
                                   {at, static_cast<std::size_t>(blocks[b].metadata)}, top_nodes));
        }
        return std::uint64_t{0};
      },
      [](std::size_t) { return Status::ok(); });
  if (!st.is_ok()) return st;
  return rows;
}

Status ArrowReader::prebuffer_ipc_metadata(const std::string& path,
                                           arrow::ipc::RecordBatchFileReader& reader,
                                           const std::vector<int>& batches) {
  const arrow::Status st = reader.PreBufferMetadata(batches);
  if (st.ok()) return Status::ok();
  if (read_failure(st) != nullptr) return arrow_error(path, st, ErrorCode::kIo);
  return Status(ErrorCode::kIo,
                path + ": cannot read the record batches' metadata: " + st.ToString());
}

Status ArrowReader::read_ipc_remote(const ReadSpec& l, const Shard& s, const ArrowExtra& e,
                                    std::int64_t lo, std::int64_t hi,
                                    const std::vector<std::string>& names,
                                    const std::vector<ColumnShape>& shapes, OpenFile& f,
                                    std::byte* dst) {
  struct Needed {
    int g;
    std::int64_t start;  // the file row of its first row
    std::shared_ptr<arrow::RecordBatch> batch;
  };
  struct Unit {
    std::size_t a, b;            // needed[a, b)
    std::int64_t at = 0, n = 0;  // the bytes fetched as one; none where n == 0
  };
  std::vector<Needed> needed;
  std::int64_t start = 0;
  std::int64_t needed_rows = 0;
  for (std::size_t g = 0; g < e.group_rows.size(); ++g) {
    const std::int64_t end = start + e.group_rows[g];
    if (end > lo && start < hi) {
      needed.push_back({static_cast<int>(g), start, nullptr});
      needed_rows += e.group_rows[g];
    }
    start = end;
  }
  if (needed.empty()) return Status::ok();
  SHARDLOAD_ASSIGN_OR_RETURN(const std::size_t in_flight, chunks_in_flight_of(s.path));
  const std::vector<IpcBlock>& blocks = f.tail->batches;
  const auto block = [&](std::size_t i) { return blocks[static_cast<std::size_t>(needed[i].g)]; };
  std::int64_t span = 0;      // the needed batches' metadata and bodies
  std::int64_t selected = 0;  // the selected columns' values in them
  for (std::size_t i = 0; i < needed.size(); ++i) span += block(i).metadata + block(i).body;
  for (const ColumnShape& c : shapes) {
    selected += c.elements() * static_cast<std::int64_t>(c.dtype.size);
  }
  selected *= needed_rows;
  std::vector<Unit> units;
  if (2 * selected >= span) {
    // Runs of neighbouring batches of up to request_bytes each (a larger batch alone), as
    // a piece of an npy object is one GET up to that size: measured on loopback, units of
    // 1 MiB, 8 at once, took twice as long as units of 8 MiB (each request's cost on the
    // server and the client was the bottleneck, not its latency).
    SHARDLOAD_ASSIGN_OR_RETURN(const StoreOptions store, store_options_of(s.path));
    const std::int64_t target = store.request_bytes;
    for (std::size_t i = 0; i < needed.size(); ++i) {
      const IpcBlock k = block(i);
      if (!units.empty()) {
        Unit& u = units.back();
        if (k.offset == u.at + u.n && u.n + k.metadata + k.body <= target) {
          u.b = i + 1;
          u.n += k.metadata + k.body;
          continue;
        }
      }
      units.push_back({i, i + 1, k.offset, k.metadata + k.body});
    }
  } else {
    std::vector<int> indices;
    for (std::size_t i = 0; i < needed.size(); ++i) {
      units.push_back({i, i + 1});
      indices.push_back(needed[i].g);
    }
    SHARDLOAD_RETURN_IF_ERROR(prebuffer_ipc_metadata(s.path, *f.ipc, indices));
  }
  const auto where = [&](std::size_t i) {
    return s.path + ": record batch " + std::to_string(needed[i].g);
  };
  return fetch_ahead(
      units.size(), in_flight, kRemoteIpcWindowBytes,
      [&](std::size_t u) -> Result<std::uint64_t> {
        const Unit& unit = units[u];
        if (unit.n > 0) {
          auto bytes = f.remote->ReadAt(unit.at, unit.n);
          if (!bytes.ok()) return arrow_error(where(unit.a), bytes.status(), ErrorCode::kIo);
          if ((*bytes)->size() != unit.n) {
            return Status(ErrorCode::kChanged, where(unit.a) + ": the object ends before " +
                                                   std::to_string(unit.at + unit.n));
          }
          f.remote->hold(unit.at, *std::move(bytes));
        }
        Status st;
        for (std::size_t i = unit.a; i < unit.b && st.is_ok(); ++i) {
          auto batch = f.ipc->ReadRecordBatch(needed[i].g);
          if (batch.ok()) {
            st = check_batch(where(i), **batch);
            needed[i].batch = *std::move(batch);
          } else {
            st = arrow_error(where(i), batch.status(), ErrorCode::kIo);
          }
        }
        // The decoded batches keep what they use of the unit's bytes.
        if (unit.n > 0) f.remote->drop(unit.at);
        if (!st.is_ok()) return st;
        std::int64_t rows = 0;
        for (std::size_t i = unit.a; i < unit.b; ++i) rows += e.group_rows[needed[i].g];
        return static_cast<std::uint64_t>(rows) * l.row_bytes;
      },
      [&](std::size_t u) -> Status {
        for (std::size_t i = units[u].a; i < units[u].b; ++i) {
          const std::shared_ptr<arrow::RecordBatch> batch = std::move(needed[i].batch);
          const std::int64_t rows = e.group_rows[needed[i].g];
          if (batch->num_rows() != rows) return rows_changed(where(i), batch->num_rows(), rows);
          if (ctx_.stats != nullptr) ctx_.stats->decodes.fetch_add(1, std::memory_order_relaxed);
          const std::int64_t first = needed[i].start;
          SHARDLOAD_RETURN_IF_ERROR(interleave(l, s, where(i), *batch, names, shapes,
                                               std::max(lo, first) - first,
                                               std::min(hi, first + rows) - first, first, lo, dst));
        }
        return Status::ok();
      });
}

Result<OpenFile> ArrowReader::open_ipc_file(const std::string& path, bool for_probe,
                                            const std::vector<int>& projection,
                                            const FileInfo* known,
                                            std::shared_ptr<IoRandomAccessFile> remote,
                                            File& checked) {
  OpenFile f;
  // IPC: probing maps the file so that a batch's row count costs no read of
  // its body (uncompressed buffers are zero-copy slices of the mapping);
  // reads use positional reads of only the needed batches and columns.
  std::shared_ptr<arrow::io::RandomAccessFile> file = remote;
  std::shared_ptr<IpcTail> tail;
  if (remote) {
    // The footer, kept from an earlier open of this snapshot or read now (a probe's from the
    // last bytes its open fetched), is held by the file: Arrow's open reads it from memory.
    if (known != nullptr && !for_probe) tail = remote_ipc_tails().find(path, *known);
    if (!tail) {
      SHARDLOAD_ASSIGN_OR_RETURN(tail, read_ipc_tail(path, *remote));
      if (known != nullptr) {
        remote_ipc_tails().put(path, *known, tail,
                               static_cast<std::size_t>(tail->bytes->size()) +
                                   tail->batches.size() * sizeof(IpcBlock));
      }
    }
    remote->hold(tail->at, tail->bytes);
  } else if (for_probe) {
    auto m = arrow::io::MemoryMappedFile::Open(descriptor_path(checked.fd(), path),
                                               arrow::io::FileMode::READ);
    if (!m.ok()) return arrow_error(path, m.status(), ErrorCode::kIo);
    file = *m;
  } else {
    auto r = arrow::io::ReadableFile::Open(checked.release());
    if (!r.ok()) return arrow_error(path, r.status(), ErrorCode::kIo);
    file = *r;
  }
  SHARDLOAD_ASSIGN_OR_RETURN(f, open_ipc(path, std::move(file), projection));
  if (tail) {
    if (static_cast<std::size_t>(f.ipc->num_record_batches()) != tail->batches.size()) {
      return Status(ErrorCode::kFormat, path + ": the footer lists " +
                                            std::to_string(tail->batches.size()) +
                                            " record batches, Arrow's reader " +
                                            std::to_string(f.ipc->num_record_batches()));
    }
    f.remote = std::move(remote);
    f.tail = std::move(tail);
  }
  return f;
}

}  // namespace shardload::detail
