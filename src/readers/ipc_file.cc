// Arrow IPC footer and record batch metadata (format/File.fbs, Message.fbs, Schema.fbs of
// the Arrow specification), read without the flatbuffers library: three tables and one vector
// of structs are all a remote read needs, and each read below checks its bounds first.
#include "readers/detail/ipc_file.hpp"

#include <optional>

namespace shardload::detail {

namespace {

// Little-endian flatbuffer bytes. Every accessor answers nullopt outside the bytes.
class Flat {
 public:
  explicit Flat(std::span<const std::byte> b) : b_(b) {}

  template <typename T>
  std::optional<T> get(std::uint64_t at) const {
    if (at > b_.size() || b_.size() - at < sizeof(T)) return std::nullopt;
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i) {
      v |= static_cast<std::uint64_t>(b_[at + i]) << (8 * i);
    }
    return static_cast<T>(v);
  }

  // A table at `at`: where its vtable says field `id` is, 0 where it is absent, nullopt for
  // a vtable outside the bytes.
  std::optional<std::uint64_t> field(std::uint64_t table, int id) const {
    const auto back = get<std::int32_t>(table);
    if (!back) return std::nullopt;
    const std::int64_t vt = static_cast<std::int64_t>(table) - *back;
    if (vt < 0) return std::nullopt;
    const auto vsize = get<std::uint16_t>(static_cast<std::uint64_t>(vt));
    const auto tsize = get<std::uint16_t>(static_cast<std::uint64_t>(vt) + 2);
    if (!vsize || !tsize || *vsize < 4 || (*vsize & 1) != 0) return std::nullopt;
    if (table + *tsize > b_.size()) return std::nullopt;
    const std::uint64_t slot = 4 + 2 * static_cast<std::uint64_t>(id);
    if (slot + 2 > *vsize) return 0;  // a field newer than the writer: absent
    const auto off = get<std::uint16_t>(static_cast<std::uint64_t>(vt) + slot);
    if (!off) return std::nullopt;
    if (*off == 0) return 0;
    if (*off >= *tsize) return std::nullopt;
    return table + *off;
  }

  // The table, vector or string an offset field at `at` points to.
  std::optional<std::uint64_t> follow(std::uint64_t at) const {
    const auto off = get<std::uint32_t>(at);
    if (!off || *off == 0) return std::nullopt;
    const std::uint64_t to = at + *off;
    if (to >= b_.size()) return std::nullopt;
    return to;
  }

  std::optional<std::uint64_t> root() const {
    if (b_.size() < 8) return std::nullopt;
    return follow(0);
  }

  std::size_t size() const { return b_.size(); }

 private:
  std::span<const std::byte> b_;
};

Status corrupt(const std::string& where, const std::string& what) {
  return Status(ErrorCode::kFormat,
                where + ": not a readable Arrow IPC file (Feather v2): " + what);
}

}  // namespace

Result<std::int64_t> ipc_footer_length(const std::string& path, std::span<const std::byte> last10) {
  static constexpr char kMagic[] = "ARROW1";
  if (last10.size() != 10) return corrupt(path, "shorter than an IPC file's ending");
  for (std::size_t i = 0; i < 6; ++i) {
    if (static_cast<char>(last10[4 + i]) != kMagic[i]) {
      return corrupt(path, "its last bytes are not the magic 'ARROW1'");
    }
  }
  const auto n = Flat(last10).get<std::int32_t>(0);
  if (!n || *n <= 0) return corrupt(path, "footer length " + std::to_string(n.value_or(0)));
  return static_cast<std::int64_t>(*n);
}

Result<std::vector<IpcBlock>> parse_ipc_footer(const std::string& path,
                                               std::span<const std::byte> footer,
                                               std::int64_t file_size) {
  const Flat f(footer);
  const auto bad = [&](const std::string& what) { return corrupt(path, "footer: " + what); };
  // The footer, its length and magic end the file; the blocks lie between the 8 bytes of the
  // leading magic and the footer.
  const std::int64_t limit = file_size - static_cast<std::int64_t>(footer.size()) - 10;
  if (limit < 8) return bad("larger than the file");
  const auto root = f.root();
  if (!root) return bad("no root table");
  const auto field = f.field(*root, 3);  // Footer.recordBatches: [Block]
  if (!field) return bad("bad table");
  std::vector<IpcBlock> blocks;
  if (*field == 0) return blocks;  // no record batches
  const auto vec = f.follow(*field);
  if (!vec) return bad("bad record batch list");
  const auto n = f.get<std::uint32_t>(*vec);
  constexpr std::uint64_t kBlockSize = 24;  // struct Block { long; int; (pad) long }
  if (!n || (f.size() - *vec - 4) / kBlockSize < *n) return bad("record batch list out of bounds");
  blocks.reserve(*n);
  for (std::uint32_t i = 0; i < *n; ++i) {
    const std::uint64_t at = *vec + 4 + i * kBlockSize;
    IpcBlock b;
    b.offset = *f.get<std::int64_t>(at);
    b.metadata = *f.get<std::int32_t>(at + 8);
    b.body = *f.get<std::int64_t>(at + 16);
    // Each bound alone first, so that the sums below cannot overflow.
    if (b.offset < 8 || b.offset > limit || b.metadata < 8 || b.metadata > limit || b.body < 0 ||
        b.body > limit || b.end() > limit) {
      return bad("record batch " + std::to_string(i) + " at " + std::to_string(b.offset) + " (" +
                 std::to_string(b.metadata) + " + " + std::to_string(b.body) +
                 " bytes) lies outside the file's " + std::to_string(limit) + " bytes of batches");
    }
    blocks.push_back(b);
  }
  return blocks;
}

Result<std::int64_t> parse_ipc_batch_rows(const std::string& where,
                                          std::span<const std::byte> message,
                                          std::span<const std::size_t> top_nodes) {
  const auto bad = [&](const std::string& what) {
    return corrupt(where, "record batch metadata: " + what);
  };
  // The encapsulated message: 0xFFFFFFFF and an int32 length (a file before Arrow 0.15 has
  // the length alone), then the Message flatbuffer.
  const Flat prefix(message);
  const auto first = prefix.get<std::uint32_t>(0);
  if (!first) return bad("shorter than its prefix");
  std::uint64_t skip = 4;
  std::optional<std::int32_t> len = static_cast<std::int32_t>(*first);
  if (*first == 0xFFFFFFFFu) {
    len = prefix.get<std::int32_t>(4);
    skip = 8;
  }
  if (!len || *len <= 0 || static_cast<std::uint64_t>(*len) > message.size() - skip) {
    return bad("its length " + std::to_string(len.value_or(-1)) + " exceeds the block's " +
               std::to_string(message.size()) + " bytes");
  }
  const Flat m(message.subspan(skip, static_cast<std::size_t>(*len)));
  const auto root = m.root();
  if (!root) return bad("no root table");
  const auto type_at = m.field(*root, 1);  // Message.header_type
  const auto header_at = m.field(*root, 2);
  if (!type_at || !header_at) return bad("bad table");
  constexpr std::uint8_t kRecordBatch = 3;  // MessageHeader: Schema 1, DictionaryBatch 2, ...
  const auto type = *type_at == 0 ? std::optional<std::uint8_t>(0) : m.get<std::uint8_t>(*type_at);
  if (!type || *type != kRecordBatch || *header_at == 0) {
    return bad("the message is not a record batch (type " +
               std::to_string(static_cast<int>(type.value_or(0))) + ")");
  }
  const auto batch = m.follow(*header_at);
  if (!batch) return bad("no record batch table");
  const auto length_at = m.field(*batch, 0);  // RecordBatch.length
  if (!length_at) return bad("bad record batch table");
  // An absent length is the default, 0.
  const auto rows =
      *length_at == 0 ? std::optional<std::int64_t>(0) : m.get<std::int64_t>(*length_at);
  if (!rows || *rows < 0) return bad("negative row count");
  if (top_nodes.empty()) return *rows;
  const auto nodes_at = m.field(*batch, 1);  // RecordBatch.nodes: [FieldNode]
  if (!nodes_at) return bad("bad record batch table");
  const auto vec = *nodes_at == 0 ? std::nullopt : m.follow(*nodes_at);
  const auto n = vec ? m.get<std::uint32_t>(*vec) : std::nullopt;
  constexpr std::uint64_t kNodeSize = 16;  // struct FieldNode { long length; long null_count; }
  if (!n || (m.size() - *vec - 4) / kNodeSize < *n) return bad("field nodes out of bounds");
  for (std::size_t c = 0; c < top_nodes.size(); ++c) {
    if (top_nodes[c] >= *n) {
      return bad(std::to_string(*n) + " field nodes, fewer than the schema's columns need");
    }
    const auto length = m.get<std::int64_t>(*vec + 4 + top_nodes[c] * kNodeSize);
    if (length != rows) {
      return bad("the batch claims " + std::to_string(*rows) + " rows, its column " +
                 std::to_string(c) + " holds " + std::to_string(length.value_or(-1)) +
                 " (Arrow refuses it: the array's length does not match the batch's)");
    }
  }
  return *rows;
}

}  // namespace shardload::detail
