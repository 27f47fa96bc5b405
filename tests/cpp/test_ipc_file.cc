// The IPC footer and batch metadata parsers (readers/detail/ipc_file.hpp) against files that
// Arrow C++ writes: batches of irregular rows (empty ones included), compressed bodies, the
// format before Arrow 0.15, dictionaries; Arrow's own reader is the oracle. Then every
// truncation and many corruptions of those bytes: an error or blocks inside the file, never
// a read outside the bytes given (the ASan build checks that).
#include <arrow/api.h>
#include <arrow/io/memory.h>
#include <arrow/ipc/reader.h>
#include <arrow/ipc/writer.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "readers/detail/ipc_file.hpp"

namespace shardload::detail {
namespace {

std::span<const std::byte> bytes_of(const arrow::Buffer& b, std::int64_t at, std::int64_t n) {
  return {reinterpret_cast<const std::byte*>(b.data()) + at, static_cast<std::size_t>(n)};
}

// An IPC file of `rows.size()` batches of those rows: columns x (float32), y (int64) and,
// with `dictionary`, a dictionary-encoded string column.
std::shared_ptr<arrow::Buffer> ipc_file(const std::vector<std::int64_t>& rows,
                                        const arrow::ipc::IpcWriteOptions& options,
                                        bool dictionary = false) {
  std::vector<std::shared_ptr<arrow::Field>> fields = {arrow::field("x", arrow::float32()),
                                                       arrow::field("y", arrow::int64())};
  if (dictionary)
    fields.push_back(arrow::field("d", arrow::dictionary(arrow::int8(), arrow::utf8())));
  auto schema = arrow::schema(fields);
  auto sink = *arrow::io::BufferOutputStream::Create();
  auto writer = *arrow::ipc::MakeFileWriter(sink, schema, options);
  std::int64_t next = 0;
  for (const std::int64_t n : rows) {
    arrow::FloatBuilder x;
    arrow::Int64Builder y;
    for (std::int64_t i = 0; i < n; ++i) {
      EXPECT_TRUE(x.Append(static_cast<float>(next + i)).ok());
      EXPECT_TRUE(y.Append(next + i).ok());
    }
    std::vector<std::shared_ptr<arrow::Array>> columns = {*x.Finish(), *y.Finish()};
    if (dictionary) {
      arrow::Int8Builder indices;
      for (std::int64_t i = 0; i < n; ++i) EXPECT_TRUE(indices.Append(i % 2).ok());
      arrow::StringBuilder words;
      EXPECT_TRUE(words.AppendValues({"even", "odd"}).ok());
      columns.push_back(*arrow::DictionaryArray::FromArrays(
          arrow::dictionary(arrow::int8(), arrow::utf8()), *indices.Finish(), *words.Finish()));
    }
    next += n;
    EXPECT_TRUE(writer->WriteRecordBatch(*arrow::RecordBatch::Make(schema, n, columns)).ok());
  }
  EXPECT_TRUE(writer->Close().ok());
  return *sink->Finish();
}

// The blocks and rows the parsers find in `file`, or the first error.
Result<std::vector<std::int64_t>> parsed_rows(const arrow::Buffer& file,
                                              std::vector<IpcBlock>* blocks = nullptr) {
  const std::int64_t size = file.size();
  if (size < 10) return Status(ErrorCode::kFormat, "short");
  SHARDLOAD_ASSIGN_OR_RETURN(const std::int64_t len,
                             ipc_footer_length("f.arrow", bytes_of(file, size - 10, 10)));
  if (len > size - 10) return Status(ErrorCode::kFormat, "footer larger than the file");
  SHARDLOAD_ASSIGN_OR_RETURN(
      std::vector<IpcBlock> found,
      parse_ipc_footer("f.arrow", bytes_of(file, size - 10 - len, len), size));
  std::vector<std::int64_t> rows;
  for (const IpcBlock& b : found) {
    EXPECT_GE(b.offset, 8);
    EXPECT_LE(b.end(), size - 10 - len);
    SHARDLOAD_ASSIGN_OR_RETURN(
        const std::int64_t r,
        parse_ipc_batch_rows("f.arrow", bytes_of(file, b.offset, b.metadata)));
    rows.push_back(r);
  }
  if (blocks != nullptr) *blocks = found;
  return rows;
}

// What Arrow's reader finds: each batch's rows.
std::vector<std::int64_t> arrow_rows(const std::shared_ptr<arrow::Buffer>& file) {
  auto reader =
      *arrow::ipc::RecordBatchFileReader::Open(std::make_shared<arrow::io::BufferReader>(file));
  std::vector<std::int64_t> rows;
  for (int b = 0; b < reader->num_record_batches(); ++b) {
    rows.push_back((*reader->ReadRecordBatch(b))->num_rows());
  }
  return rows;
}

TEST(IpcFile, FindsEachBatchsRowsAsArrowsReaderDoes) {
  const std::vector<std::int64_t> rows = {5, 0, 1000, 1, 0, 37, 4096};
  struct Case {
    const char* name;
    arrow::ipc::IpcWriteOptions options;
    bool dictionary;
  };
  std::vector<Case> cases;
  cases.push_back({"default", arrow::ipc::IpcWriteOptions::Defaults(), false});
  auto legacy = arrow::ipc::IpcWriteOptions::Defaults();
  legacy.write_legacy_ipc_format = true;  // no continuation marker before each length
  cases.push_back({"legacy", legacy, false});
  cases.push_back({"dictionary", arrow::ipc::IpcWriteOptions::Defaults(), true});
  for (const auto codec : {arrow::Compression::LZ4_FRAME, arrow::Compression::ZSTD}) {
    if (!arrow::util::Codec::IsAvailable(codec)) continue;
    auto compressed = arrow::ipc::IpcWriteOptions::Defaults();
    compressed.codec = *arrow::util::Codec::Create(codec);
    cases.push_back({"compressed", compressed, false});
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const auto file = ipc_file(rows, c.options, c.dictionary);
    std::vector<IpcBlock> blocks;
    auto found = parsed_rows(*file, &blocks);
    ASSERT_TRUE(found.is_ok()) << found.status().message();
    EXPECT_EQ(*found, rows);
    EXPECT_EQ(*found, arrow_rows(file));
    // Record batch blocks only (a dictionary batch is listed apart), in file order, apart.
    for (std::size_t i = 1; i < blocks.size(); ++i)
      EXPECT_LE(blocks[i - 1].end(), blocks[i].offset);
  }
}

TEST(IpcFile, AFileWithoutBatchesHasNoBlocks) {
  const auto file = ipc_file({}, arrow::ipc::IpcWriteOptions::Defaults());
  auto found = parsed_rows(*file);
  ASSERT_TRUE(found.is_ok()) << found.status().message();
  EXPECT_TRUE(found->empty());
}

TEST(IpcFile, RefusesWhatIsNotAnIpcFileNamingIt) {
  const std::string npy = "\x93NUMPY\x01\x00v\x00{'descr': '<f4'";
  auto len = ipc_footer_length(
      "s3://b/k.arrow",
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(npy.data()), 10));
  ASSERT_FALSE(len.is_ok());
  EXPECT_NE(len.status().message().find("s3://b/k.arrow"), std::string::npos);
  EXPECT_NE(len.status().message().find("ARROW1"), std::string::npos);
  // The schema message where a record batch's is expected.
  const auto file = ipc_file({3}, arrow::ipc::IpcWriteOptions::Defaults());
  std::int32_t schema_bytes = 0;  // the schema message's flatbuffer, after its 8-byte prefix
  std::memcpy(&schema_bytes, file->data() + 12, 4);
  auto rows = parse_ipc_batch_rows("s3://b/k.arrow", bytes_of(*file, 8, 8 + schema_bytes));
  ASSERT_FALSE(rows.is_ok());
  EXPECT_NE(rows.status().message().find("not a record batch"), std::string::npos)
      << rows.status().message();
}

// Every truncation of the footer and of a batch's metadata, and random byte changes in both:
// an error, or an answer that stays inside the file.
TEST(IpcFile, SurvivesTruncatedAndCorruptedMetadata) {
  const auto file = ipc_file({5, 0, 1000, 37}, arrow::ipc::IpcWriteOptions::Defaults());
  const std::int64_t size = file->size();
  const std::int64_t len = *ipc_footer_length("f", bytes_of(*file, size - 10, 10));
  std::vector<IpcBlock> blocks;
  ASSERT_TRUE(parsed_rows(*file, &blocks).is_ok());
  const auto span_footer = bytes_of(*file, size - 10 - len, len);
  const auto span_message = bytes_of(*file, blocks[2].offset, blocks[2].metadata);
  const std::vector<std::byte> footer(span_footer.begin(), span_footer.end());
  const std::vector<std::byte> message(span_message.begin(), span_message.end());
  for (std::size_t n = 0; n < footer.size(); ++n) {
    auto b = parse_ipc_footer("f", std::span(footer).first(n), size);
    if (b.is_ok()) {
      for (const IpcBlock& k : *b) EXPECT_LE(k.end(), size);
    }
  }
  for (std::size_t n = 0; n < message.size(); ++n) {
    auto r = parse_ipc_batch_rows("f", std::span(message).first(n));
    if (r.is_ok()) EXPECT_GE(*r, 0);
  }
  std::mt19937 rng(7);
  int refused = 0;
  for (int round = 0; round < 4000; ++round) {
    auto f = footer;
    auto m = message;
    for (int k = 0; k < 1 + round % 4; ++k) {
      f[rng() % f.size()] = static_cast<std::byte>(rng());
      m[rng() % m.size()] = static_cast<std::byte>(rng());
    }
    auto b = parse_ipc_footer("f", f, size);
    if (b.is_ok()) {
      for (const IpcBlock& k : *b) {
        EXPECT_GE(k.offset, 8);
        EXPECT_LE(k.end(), size - 10 - len);
      }
    } else {
      ++refused;
    }
    auto r = parse_ipc_batch_rows("f", m);
    if (r.is_ok()) {
      EXPECT_GE(*r, 0);
    } else {
      ++refused;
    }
  }
  EXPECT_GT(refused, 0);  // the corruptions reached the parsers
}

}  // namespace
}  // namespace shardload::detail
