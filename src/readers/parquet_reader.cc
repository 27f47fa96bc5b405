// What only the Parquet side of the reader needs (arrow_reader.cc has the steps both formats
// share, the row-group reads included): opening a file, the leaf columns under the selected
// fields, and each row group's rows checked against its column chunks.
#include <arrow/io/file.h>
#include <parquet/arrow/reader.h>
#include <parquet/arrow/schema.h>
#include <parquet/file_reader.h>
#include <parquet/metadata.h>
#include <parquet/properties.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "readers/detail/arrow_reader.hpp"

namespace shardload::detail {

std::vector<std::pair<int, std::size_t>> ArrowReader::parquet_leaves(const OpenFile& f,
                                                                     const std::vector<int>& idx) {
  const auto& fields = f.parquet->manifest().schema_fields;
  std::vector<std::pair<const parquet::arrow::SchemaField*, std::size_t>> todo;
  for (std::size_t c = 0; c < idx.size(); ++c) {
    todo.emplace_back(&fields[static_cast<std::size_t>(idx[c])], c);
  }
  std::vector<std::pair<int, std::size_t>> leaves;
  while (!todo.empty()) {
    const auto [field, c] = todo.back();
    todo.pop_back();
    if (field->is_leaf()) leaves.emplace_back(field->column_index, c);
    for (const auto& child : field->children) todo.emplace_back(&child, c);
  }
  std::sort(leaves.begin(), leaves.end());  // the columns in the file's order
  return leaves;
}

Status ArrowReader::check_row_groups(const std::string& path, const OpenFile& f,
                                     const std::vector<int>& idx,
                                     const std::vector<std::string>& names) {
  const auto md = f.parquet->parquet_reader()->metadata();
  const auto leaves = parquet_leaves(f, idx);
  for (int g = 0; g < md->num_row_groups(); ++g) {
    const auto rg = md->RowGroup(g);
    const std::int64_t rows = rg->num_rows();
    for (const auto& [leaf, c] : leaves) {
      const std::int64_t values = rg->ColumnChunk(leaf)->num_values();
      const bool repeated = md->schema()->Column(leaf)->max_repetition_level() > 0;
      if (repeated ? values < rows : values != rows) {
        return Status(ErrorCode::kFormat,
                      path + ": row group " + std::to_string(g) + ": column '" + names[c] +
                          "' holds " + std::to_string(values) + " values, but the row group " +
                          "says " + std::to_string(rows) + " rows" +
                          (repeated ? " (a list column holds at least one per row)" : ""));
      }
    }
  }
  return Status::ok();
}

Result<OpenFile> ArrowReader::open_parquet(const std::string& path, bool for_probe,
                                           const FileInfo* known,
                                           std::shared_ptr<IoRandomAccessFile> remote,
                                           File& checked) {
  OpenFile f;
  arrow::Result<std::shared_ptr<arrow::io::RandomAccessFile>> file =
      std::shared_ptr<arrow::io::RandomAccessFile>(remote);
  if (!remote) file = arrow::io::ReadableFile::Open(checked.release());
  if (!file.ok()) return arrow_error(path, file.status(), ErrorCode::kIo);
  parquet::ArrowReaderProperties props;
  props.set_use_threads(false);
  // See the top of arrow_reader.cc. A remote file's groups are pre-buffered by read_groups
  // instead, several at once (GetRecordBatchReader's would replace that buffer).
  props.set_pre_buffer(!remote);
  std::shared_ptr<parquet::FileMetaData> footer;
  if (remote && known != nullptr && !for_probe) footer = remote_footers().find(path, *known);
  parquet::arrow::FileReaderBuilder builder;
  arrow::Status st = builder.Open(*file, parquet::default_reader_properties(), footer);
  if (!st.ok()) {
    // A read the key's store failed is that, not a file Parquet could not read.
    if (read_failure(st) != nullptr) return arrow_error(path, st, ErrorCode::kIo);
    return Status(ErrorCode::kFormat, path + ": not a readable Parquet file: " + st.ToString());
  }
  builder.properties(props);
  auto reader = builder.Build();
  if (!reader.ok()) {
    if (read_failure(reader.status()) != nullptr) {
      return arrow_error(path, reader.status(), ErrorCode::kIo);
    }
    return Status(ErrorCode::kFormat,
                  path + ": not a readable Parquet file: " + reader.status().ToString());
  }
  f.parquet = std::move(*reader);
  st = f.parquet->GetSchema(&f.schema);
  if (!st.ok()) return Status(ErrorCode::kFormat, path + ": schema: " + st.ToString());
  const auto md = f.parquet->parquet_reader()->metadata();
  for (int g = 0; g < md->num_row_groups(); ++g)
    f.group_rows.push_back(md->RowGroup(g)->num_rows());
  if (remote && known != nullptr && footer == nullptr) {
    remote_footers().put(path, *known, md, md->size());
  }
  return f;
}

}  // namespace shardload::detail
