#include "legate/detail/load_body.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "engine/detail/strided.hpp"
#include "legate/detail/tasks.hpp"
#include "shardload/codec.hpp"
#include "shardload/fill.hpp"
#include "shardload/format.hpp"

namespace shardload::detail {

Status fill_tile_rows(const Tile& t, std::int64_t lo, std::int64_t hi) {
  return fill_rows(t.layout, lo, hi, t.ptr + static_cast<std::size_t>(lo) * t.layout.row_bytes);
}

namespace {

Status arg_error(const std::string& msg) {
  return {ErrorCode::kInvalidArgument, "load task arguments: " + msg};
}

}  // namespace

std::string task_error_message(const Status& status) {
  std::string out(kTaskErrorMark);
  out += std::to_string(status.sys_errno()) + ";" + std::to_string(status.path().size()) + ";";
  out += status.path();
  out += status.message();
  return out;
}

namespace {

// A decimal int closed by ';' at *pos, moved past it; false unless it is one.
bool take_number(std::string_view s, std::size_t* pos, std::uint64_t limit, std::uint64_t* out) {
  std::uint64_t v = 0;
  std::size_t i = *pos;
  for (; i < s.size() && s[i] >= '0' && s[i] <= '9' && i - *pos < 20; ++i) {
    v = v * 10 + static_cast<std::uint64_t>(s[i] - '0');
    if (v > limit) return false;
  }
  if (i == *pos || i >= s.size() || s[i] != ';') return false;
  *pos = i + 1;
  *out = v;
  return true;
}

}  // namespace

Status task_error_status(std::int32_t code, std::string_view message) {
  // An index that is no error code (another exception, or a runtime that did not keep it) is
  // a read failure, as anything found while reading is.
  const bool known = code > static_cast<std::int32_t>(ErrorCode::kOk) &&
                     code <= static_cast<std::int32_t>(ErrorCode::kNoMemory);
  const ErrorCode ec = known ? static_cast<ErrorCode>(code) : ErrorCode::kIo;
  std::size_t pos = kTaskErrorMark.size();
  std::uint64_t err = 0;
  std::uint64_t path_size = 0;
  if (message.substr(0, kTaskErrorMark.size()) != kTaskErrorMark ||
      !take_number(message, &pos, INT32_MAX, &err) ||
      !take_number(message, &pos, message.size(), &path_size) || path_size > message.size() - pos) {
    return {ec, std::string(message)};
  }
  const std::string path(message.substr(pos, path_size));
  return Status(ec, std::string(message.substr(pos + path_size)))
      .with_path(path)
      .with_errno(static_cast<int>(err));
}

void throw_task_error(const Status& status) {
  throw legate::TaskException{static_cast<std::int32_t>(status.code()), task_error_message(status)};
}

Status status_from_task_error(const legate::TaskException& e) {
  return task_error_status(e.index(), e.error_message());
}

Status tile_error(const Tile& t, const Status& given) {
  Status st = given;
  if (st.sys_errno() == ENOENT) {
    // Discovery found the file. Gone since, or never there for this rank: on several ranks
    // or nodes, a path that only some of them see fails here, on the ranks whose tiles read it.
    st = Status{st.code(), st.message() +
                               " (discovery found it: it was removed since, or this rank does "
                               "not see it; the source must be visible to every rank at the "
                               "same path)"}
             .with_path(st.path())
             .with_errno(st.sys_errno());
  }
  return st.with_context("tile " + std::to_string(t.index) + " (rows [" + std::to_string(t.lo) +
                         ", " + std::to_string(t.hi) + "))");
}

Result<Tile> prepare_tile(legate::TaskContext& context) {
  Tile t;
  const auto bytes = context.scalar(0).values<std::uint8_t>();
  const auto offsets = context.scalar(1).values<std::int64_t>();
  const auto tile_rows = context.scalar(2).value<std::int64_t>();
  t.index = context.get_task_index()[0];
  // Only this tile's shards: the launcher cut the layout at the plan's tiles.
  SHARDLOAD_ASSIGN_OR_RETURN(t.layout,
                             decode_tile(std::span(bytes.data(), bytes.size()),
                                         std::span(offsets.data(), offsets.size()), t.index));
  const std::int64_t rows = t.layout.total_rows();
  if (tile_rows < 1 || rows < 1 || rows > tile_rows ||
      __builtin_mul_overflow(t.index, tile_rows, &t.lo)) {
    return arg_error("tile " + std::to_string(t.index) + " has " + std::to_string(rows) +
                     " rows, expected 1 to the tile rows " + std::to_string(tile_rows));
  }
  t.hi = t.lo + rows;
  pieces_for_rows(t.layout.offsets, 0, rows, &t.pieces);

  legate::PhysicalStore store = context.output(0).data();
  const legate::Domain dom = store.domain();
  const auto dim = static_cast<std::size_t>(dom.get_dim());
  if (dim != t.layout.trailing_shape.size() + 1) {
    return arg_error("the store has " + std::to_string(dim) + " dimensions, the layout " +
                     std::to_string(t.layout.trailing_shape.size() + 1));
  }
  // The tiling gives this point exactly rows [lo, hi) with full trailing extents.
  for (std::size_t d = 0; d < dim; ++d) {
    const std::int64_t want_lo = d == 0 ? t.lo : 0;
    const std::int64_t want_hi = d == 0 ? t.hi : t.layout.trailing_shape[d - 1];
    const std::int64_t got_lo = dom.lo()[static_cast<int>(d)];
    const std::int64_t got_hi = dom.hi()[static_cast<int>(d)] + 1;
    if (got_lo != want_lo || got_hi != want_hi) {
      return arg_error("the store's piece spans [" + std::to_string(got_lo) + ", " +
                       std::to_string(got_hi) + ") in dimension " + std::to_string(d) +
                       ", the tile [" + std::to_string(want_lo) + ", " + std::to_string(want_hi) +
                       ")");
    }
    t.extents.push_back(want_hi - want_lo);
  }
  if (t.hi > t.lo && t.layout.row_bytes > 0) {
    const legate::InlineAllocation alloc = store.get_inline_allocation();
    t.ptr = static_cast<std::byte*>(alloc.ptr);
    t.strides = alloc.strides;
    t.dense = is_dense_c_order(t.extents, t.strides, t.layout.dtype.size);
  }
  return t;
}

Status fill_host_tile(const Tile& t) {
  if (t.ptr == nullptr) return Status::ok();  // an empty tile
  const std::int64_t rows = t.hi - t.lo;
  const std::size_t row_bytes = t.layout.row_bytes;
  if (t.dense) return fill_pieces(t.layout, t.pieces, t.ptr);
  // Not dense C-order: fill bounded chunks of rows, then scatter them.
  constexpr std::size_t kChunkBytes = std::size_t{4} << 20;
  const auto chunk_rows = static_cast<std::int64_t>(
      std::max<std::size_t>(1, kChunkBytes / std::max<std::size_t>(row_bytes, 1)));
  std::unique_ptr<std::byte[]> buf(new (std::nothrow)
                                       std::byte[static_cast<std::size_t>(chunk_rows) * row_bytes]);
  if (!buf) return {ErrorCode::kIo, "cannot allocate the scatter buffer"};
  // One reader for every chunk: a decode unit spanning chunks is decoded once.
  SHARDLOAD_ASSIGN_OR_RETURN(auto filler, RowFiller::create(t.layout));
  const auto copy = [](std::byte* d, const std::byte* s, std::size_t n) {
    std::memcpy(d, s, n);
    return true;
  };
  for (std::int64_t a = 0; a < rows; a += chunk_rows) {
    const std::int64_t b = std::min(rows, a + chunk_rows);
    SHARDLOAD_RETURN_IF_ERROR(filler->fill(a, b, buf.get()));
    scatter_rows(buf.get(), b - a, t.extents, t.strides, t.layout.dtype.size,
                 t.ptr + static_cast<std::size_t>(a) * t.strides[0], copy);
  }
  return Status::ok();
}

void encode_record(const Status& st, std::byte* record, std::size_t size) {
  if (size < kRecordHeader) return;
  const auto code = static_cast<std::int32_t>(st.code());
  const std::size_t room = size - kRecordHeader;
  // The same frame as a task's exception, so the file and errno come back as data. Paths are
  // what a message must keep: the launcher sizes records for the longest path of the layout
  // three times over (the frame's and the message's), so only a message of unusual length is
  // cut, at its end; a frame whose path alone would not fit goes without the file.
  std::string text;
  std::size_t frame = 0;
  if (!st.is_ok()) {
    text = task_error_message(st);
    frame = text.size() - st.message().size();
    if (frame > room) {
      text = task_error_message(Status(st.code(), st.message()).with_errno(st.sys_errno()));
      frame = text.size() - st.message().size();
    }
  }
  if (text.size() > room) {
    constexpr std::string_view kCut = " [...]";
    const std::size_t keep = room > frame + kCut.size() ? room - kCut.size() : frame;
    text.resize(std::min(keep, room));
    // A cut inside an option's mark would leave half a mark for the front end to print: cut
    // before it instead (the marks come in pairs; the frame holds none of the message's).
    const char mark = option_mention("dtype").front();
    const auto marks =
        std::count(text.begin() + static_cast<std::ptrdiff_t>(frame), text.end(), mark);
    if (marks % 2 != 0) text.resize(std::max(text.rfind(mark), frame));
    text += std::string(kCut.substr(0, room - text.size()));
  }
  const auto length = static_cast<std::int32_t>(text.size());
  std::memcpy(record, &code, 4);
  std::memcpy(record + 4, &length, 4);
  std::memcpy(record + kRecordHeader, text.data(), text.size());
}

Status decode_record(const std::byte* record, std::size_t size) {
  if (size < kRecordHeader) return {ErrorCode::kIo, "load task: error record too small"};
  std::int32_t code = 0;
  std::int32_t length = 0;
  std::memcpy(&code, record, 4);
  std::memcpy(&length, record + 4, 4);
  if (code == static_cast<std::int32_t>(ErrorCode::kOk)) return Status::ok();
  const bool known = code > static_cast<std::int32_t>(ErrorCode::kOk) &&
                     code <= static_cast<std::int32_t>(ErrorCode::kNoMemory);
  if (!known || length < 0 || static_cast<std::size_t>(length) > size - kRecordHeader) {
    return {ErrorCode::kIo, "load task: damaged error record (code " + std::to_string(code) +
                                ", length " + std::to_string(length) + ")"};
  }
  return task_error_status(code,
                           std::string_view(reinterpret_cast<const char*>(record + kRecordHeader),
                                            static_cast<std::size_t>(length)));
}

RecordPiece record_piece(legate::TaskContext& context) noexcept {
  try {
    legate::PhysicalStore store = context.output(1).data();
    const legate::Domain dom = store.domain();
    const std::size_t size = dom.get_volume();
    if (size < kRecordHeader) return {};
    const legate::InlineAllocation alloc = store.get_inline_allocation();
    // One byte per element along axis 0, every other extent 1: dense whatever the strides.
    for (int d = 1; d < dom.get_dim(); ++d) {
      if (dom.hi()[d] != dom.lo()[d]) return {};
    }
    if (!alloc.strides.empty() && alloc.strides[0] != 1) return {};
    return {static_cast<std::byte*>(alloc.ptr), size};
  } catch (...) {
    return {};
  }
}

void write_host_record(legate::TaskContext& context, const Status& status) noexcept {
  const RecordPiece record = record_piece(context);
  if (record.ptr == nullptr) {
    std::fprintf(stderr, "shardload: load task: its error record is not one dense piece\n");
    std::abort();
  }
  encode_record(status, record.ptr, record.size);
}

}  // namespace shardload::detail
