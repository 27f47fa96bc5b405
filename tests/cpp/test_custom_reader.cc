// Readers registered by name (shardload/reader_registry.hpp): discovery, the codec, reads
// through the engine, and the guard that turns a user reader's exceptions into a Status.
#include <sys/stat.h>

#include <cstring>
#include <stdexcept>

#include "cpp/rows_format.hpp"
#include "engine/detail/probe.hpp"
#include "shardload/codec.hpp"
#include "shardload/fill.hpp"
#include "shardload/layout.hpp"
#include "shardload/reader_registry.hpp"
#include "util.hpp"

namespace shardload {
namespace {

using testing::TempDir;

// A reader whose probe reports what the test sets, and whose read throws.
struct Scripted {
  static inline std::int64_t rows = 2;
  static inline std::string dtype = "float32";
  static inline bool throw_in_probe = false;
};

class ScriptedReader final : public ShardReader {
 public:
  Result<ShardProbe> probe(const std::string& path) override {
    if (Scripted::throw_in_probe) throw std::runtime_error("probe blew up");
    ShardProbe p;
    p.shard.path = path;
    p.shard.rows = Scripted::rows;
    p.dtype = parse_dtype(Scripted::dtype).value();
    return p;
  }
  Status read_rows(const ReadSpec&, const Shard&, std::int64_t, std::int64_t, std::byte*) override {
    throw std::runtime_error("read blew up");
  }
};

void register_once() {
  static const bool done = [] {
    EXPECT_TRUE(rows_format::register_rows_reader());
    EXPECT_TRUE(register_reader(
        {"scripted",
         [](const FormatOptions&, const ReaderContext&) -> Result<std::unique_ptr<ShardReader>> {
           return std::unique_ptr<ShardReader>(new ScriptedReader);
         },
         {".scr"},
         {.parallel_probe = true}}));
    return true;
  }();
  (void)done;
}

class CustomReader : public ::testing::Test {
 protected:
  void SetUp() override {
    register_once();
    Scripted::rows = 2;
    Scripted::dtype = "float32";
    Scripted::throw_in_probe = false;
  }
  // Three .rows shards of 3 columns: 4, 0 and 5 rows of consecutive floats.
  std::vector<std::string> write_rows() {
    std::vector<std::string> paths;
    float first = 0;
    for (const std::int64_t rows : {4, 0, 5}) {
      paths.push_back(dir_.file("shard_000" + std::to_string(paths.size()) + ".rows"));
      EXPECT_TRUE(rows_format::write_rows_file(paths.back(), rows, 3, first));
      first += static_cast<float>(rows * 3);
    }
    return paths;
  }
  TempDir dir_;
};

TEST_F(CustomReader, RegistrationRefusesBadNamesTakenNamesAndExtensions) {
  const ReaderFactory factory = [](const FormatOptions&,
                                   const ReaderContext&) -> Result<std::unique_ptr<ShardReader>> {
    return std::unique_ptr<ShardReader>();
  };
  EXPECT_EQ(register_reader({"", factory, {}}).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(register_reader({"a b", factory, {}}).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(register_reader({"nofactory", nullptr, {}}).code(), ErrorCode::kInvalidArgument);
  const Status taken = register_reader({"rows", factory, {}});
  EXPECT_NE(taken.message().find("'rows' is already registered"), std::string::npos)
      << taken.message();
  const Status builtin = register_reader({"mine", factory, {".npy"}});
  EXPECT_NE(builtin.message().find("built-in npy"), std::string::npos) << builtin.message();
  const Status ext = register_reader({"mine", factory, {".rows"}});
  EXPECT_NE(ext.message().find("taken by the reader 'rows'"), std::string::npos) << ext.message();
  EXPECT_EQ(register_reader({"mine", factory, {"rows"}}).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(registered_readers(), (std::vector<std::string>{"rows", "scripted"}));
}

TEST_F(CustomReader, DiscoversByNameByExtensionAndByDirectoryAndReadsAcrossShards) {
  const auto paths = write_rows();
  for (const auto& found :
       {try_discover_paths(paths, {nullptr, custom_format("rows")}), try_discover_paths(paths),
        try_discover(Source::directory(dir_.path()))}) {
    ASSERT_TRUE(found) << found.status().message();
    EXPECT_EQ(found->format, Format::kCustom);
    EXPECT_EQ(found->options.reader, "rows");
    EXPECT_EQ(found->shape(), (std::vector<std::int64_t>{9, 3}));
    EXPECT_EQ(found->dtype.name(), "float32");
    std::vector<float> got(27, -1.0f);
    ASSERT_TRUE(fill_rows(*found, 0, 9, reinterpret_cast<std::byte*>(got.data())));
    for (std::size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], static_cast<float>(i)) << i;
    std::vector<float> part(6, -1.0f);  // rows 3..5: the end of shard 0, over the empty one
    ASSERT_TRUE(fill_rows(*found, 3, 5, reinterpret_cast<std::byte*>(part.data())));
    for (std::size_t i = 0; i < part.size(); ++i) EXPECT_EQ(part[i], static_cast<float>(9 + i));
  }
}

// Two registered readers are two descriptors, told apart by extension and by name, each
// with its own capabilities, which the engine asks as it asks a built-in format's.
TEST_F(CustomReader, EachRegisteredReaderHasItsOwnDescriptor) {
  const FormatDescriptor* rows = registered_format_for_path("d/shard_0000.rows");
  const FormatDescriptor* scripted = registered_format_for_path("d/shard_0000.scr/");
  ASSERT_NE(rows, nullptr);
  ASSERT_NE(scripted, nullptr);
  EXPECT_NE(rows, scripted);
  EXPECT_EQ(rows->name, "rows");
  EXPECT_EQ(scripted->name, "scripted");
  EXPECT_EQ(scripted->extensions, std::vector<std::string>{".scr"});
  EXPECT_EQ(rows->format, Format::kCustom);
  EXPECT_EQ(scripted->format, Format::kCustom);
  EXPECT_EQ(find_registered_format("rows"), rows);
  EXPECT_EQ(find_format(Format::kCustom, "scripted"), scripted);
  EXPECT_EQ(find_format(Format::kNpy, "scripted"), find_format(Format::kNpy));
  EXPECT_EQ(find_format(Format::kCustom, "nobody"), nullptr);
  EXPECT_EQ(registered_format_for_path("d/shard_0000.npy"), nullptr);
  EXPECT_FALSE(rows->capabilities.parallel_probe);
  EXPECT_TRUE(scripted->capabilities.parallel_probe);
  EXPECT_EQ(detail::probe_threads(rows, {}, 100000, 0), 1u);
  EXPECT_GT(detail::probe_threads(scripted, {}, 100000, 0), 1u);
  auto reader = scripted->make_reader(custom_format("scripted"), {});
  ASSERT_TRUE(reader) << reader.status().message();
  auto probe = (*reader)->probe("x.scr");
  ASSERT_TRUE(probe);
  EXPECT_EQ(probe->shard.rows, Scripted::rows);
}

// A registered reader's descriptor answers what the engine asks a built-in format's: its
// default naming (its first extension) and, in messages, its own name.
TEST_F(CustomReader, ADirectoryTakesTheReadersDefaultNamingAndNamesTheReader) {
  const auto paths = write_rows();
  // Another numbered group of the same reader: the default naming wins, as for npy.
  ASSERT_TRUE(rows_format::write_rows_file(dir_.file("notes_1.rows"), 2, 3, 0.0f));
  const auto found = try_discover(Source::directory(dir_.path()));
  ASSERT_TRUE(found) << found.status().message();
  EXPECT_EQ(found->options.reader, "rows");
  EXPECT_EQ(found->shards.size(), 3u);
  EXPECT_EQ(found->shape(), (std::vector<std::int64_t>{9, 3}));
  EXPECT_EQ(default_pattern(custom_format("rows")).value(), "shard_{:04d}.rows");
  EXPECT_EQ(default_pattern(FormatOptions{}).value(), std::string(kDefaultPattern));
  EXPECT_FALSE(default_pattern(custom_format("nobody")));

  // Groups of two readers: the error names each group's reader, not "custom".
  ASSERT_TRUE(rows_format::write_rows_file(dir_.file("part_1.scr"), 2, 3, 0.0f));
  const auto two = try_discover(Source::directory(dir_.path()));
  ASSERT_FALSE(two);
  EXPECT_NE(two.status().message().find("files, rows)"), std::string::npos)
      << two.status().message();
  EXPECT_NE(two.status().message().find("(1 file, scripted)"), std::string::npos)
      << two.status().message();
}

// Found by extension, a registered reader is selected as a format named would be: the
// other options the caller gave stay and reach the reader (they were dropped before).
TEST_F(CustomReader, AReaderFoundByExtensionKeepsTheOtherOptions) {
  const auto paths = write_rows();
  DiscoverOptions o;
  o.format.dataset = "inner";
  for (const auto& found :
       {try_discover_paths(paths, o), try_discover(Source::directory(dir_.path()), o)}) {
    ASSERT_TRUE(found) << found.status().message();
    EXPECT_EQ(found->format, Format::kCustom);
    EXPECT_EQ(found->options.reader, "rows");
    EXPECT_EQ(found->options.dataset, "inner");
  }
}

TEST_F(CustomReader, TheNameTravelsThroughTheCodec) {
  const auto layout = try_discover_paths(write_rows(), {nullptr, custom_format("rows")});
  ASSERT_TRUE(layout);
  const auto back = decode_layout(encode_layout(*layout));
  ASSERT_TRUE(back) << back.status().message();
  EXPECT_EQ(back->format, Format::kCustom);
  EXPECT_EQ(back->options.reader, "rows");
  EXPECT_EQ(encode_layout(*back), encode_layout(*layout));
}

TEST_F(CustomReader, AnUnknownNameIsAClearErrorWhereTheReaderIsMade) {
  auto layout = try_discover_paths(write_rows(), {nullptr, custom_format("rows")}).value();
  // The task side of a rank that did not register the reader.
  layout.options.reader = "nowhere";
  std::vector<float> got(27);
  const Status s = fill_rows(layout, 0, 9, reinterpret_cast<std::byte*>(got.data()));
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("no reader is registered as 'nowhere'"), std::string::npos)
      << s.message();
  const auto found = try_discover_paths(write_rows(), {nullptr, custom_format("nowhere")});
  ASSERT_FALSE(found);
  EXPECT_NE(found.status().message().find("'nowhere'"), std::string::npos);
}

TEST_F(CustomReader, DiscoveryChecksWhatTheReaderReports) {
  const std::vector<std::string> paths = {dir_.file("a.scr"), dir_.file("b.scr")};
  for (const auto& p : paths) testing::write_file(p, "x");
  Scripted::rows = -3;
  auto found = try_discover_paths(paths);
  ASSERT_FALSE(found);
  EXPECT_EQ(found.status().code(), ErrorCode::kLayout);
  EXPECT_NE(found.status().message().find(paths[0] + ": rows: the reader 'scripted' reported -3"),
            std::string::npos)
      << found.status().message();

  // A dtype that differs between shards names the second file.
  struct Alternate final : ShardReader {
    int calls = 0;
    Result<ShardProbe> probe(const std::string& path) override {
      ShardProbe p;
      p.shard.path = path;
      p.dtype = parse_dtype(calls++ == 0 ? "float32" : "int64").value();
      return p;
    }
    Status read_rows(const ReadSpec&, const Shard&, std::int64_t, std::int64_t,
                     std::byte*) override {
      return Status::ok();
    }
  };
  ASSERT_TRUE(register_reader(
      {"alternate",
       [](const FormatOptions&, const ReaderContext&) -> Result<std::unique_ptr<ShardReader>> {
         return std::unique_ptr<ShardReader>(new Alternate);
       },
       {}}));
  found = try_discover_paths(paths, {nullptr, custom_format("alternate")});
  ASSERT_FALSE(found);
  EXPECT_NE(found.status().message().find(paths[1] + ": dtype int64 differs from float32"),
            std::string::npos)
      << found.status().message();
}

TEST_F(CustomReader, AFifoIsRefusedBeforeTheReaderSeesIt) {
  const std::string fifo = dir_.file("pipe.scr");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto found = try_discover_paths({fifo});
  ASSERT_FALSE(found);
  EXPECT_EQ(found.status().code(), ErrorCode::kLayout);
  EXPECT_NE(found.status().message().find(fifo + ": not a regular file"), std::string::npos)
      << found.status().message();
}

TEST_F(CustomReader, ExceptionsFromAUserReaderBecomeStatusesNamingTheFile) {
  const std::string path = dir_.file("a.scr");
  testing::write_file(path, "x");
  Scripted::throw_in_probe = true;
  auto found = try_discover_paths({path});
  ASSERT_FALSE(found);
  EXPECT_EQ(found.status().code(), ErrorCode::kLayout);
  EXPECT_EQ(found.status().path(), path);  // as data, for the front ends' filename
  EXPECT_NE(found.status().message().find(path + ": probe blew up"), std::string::npos)
      << found.status().message();
  Scripted::throw_in_probe = false;
  found = try_discover_paths({path});
  ASSERT_TRUE(found) << found.status().message();
  std::vector<float> got(2);
  const Status s = fill_rows(*found, 0, 2, reinterpret_cast<std::byte*>(got.data()));
  EXPECT_EQ(s.code(), ErrorCode::kIo);
  EXPECT_EQ(s.path(), path);
  EXPECT_NE(s.message().find(path), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("read blew up"), std::string::npos) << s.message();
}

TEST_F(CustomReader, AFormatOptionNamesABuiltInFormatOrARegisteredReader) {
  FormatOptions o;
  ASSERT_TRUE(set_format_option("rows", &o));
  EXPECT_EQ(o.format, Format::kCustom);
  EXPECT_EQ(o.reader, "rows");
  // A built-in name wins and clears the reader; "auto" stays auto.
  ASSERT_TRUE(set_format_option("npy", &o));
  EXPECT_EQ(o.format, Format::kNpy);
  EXPECT_EQ(o.reader, "");
  ASSERT_TRUE(set_format_option("auto", &o));
  EXPECT_EQ(o.format, Format::kAuto);
  // Neither: parse_format's error, the options untouched.
  o = custom_format("rows");
  const Status s = set_format_option("no_such_reader", &o);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("unknown format 'no_such_reader'"), std::string::npos) << s.message();
  EXPECT_EQ(o, custom_format("rows"));
}

}  // namespace
}  // namespace shardload
