#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

#include "shardload/fill.hpp"
#include "shardload/layout.hpp"
#include "util.hpp"

namespace shardload {
namespace {

using testing::npy_bytes;
using testing::npy_dict;

class LayoutTest : public ::testing::Test {
 protected:
  void shard(int i, const std::string& descr, const std::string& shape, std::size_t bytes,
             bool fortran = false) {
    const NumberPattern p{"shard_", 4, ".npy"};
    testing::write_file(dir_.file(p.format(i)),
                        npy_bytes(npy_dict(descr, fortran, shape), std::string(bytes, '\0')));
  }
  std::string message() {
    auto l = try_discover(Source::directory(dir_.path()));
    EXPECT_FALSE(l);
    EXPECT_EQ(l.status().code(), ErrorCode::kLayout);
    return l.status().message();
  }
  testing::TempDir dir_;
};

TEST_F(LayoutTest, RowsOffsetsAndMetadata) {
  shard(0, "<f4", "(3, 2)", 24);
  shard(1, ">f4", "(0, 2)", 0);
  shard(2, "<f4", "(5, 2)", 40, true);
  auto l = try_discover(Source::directory(dir_.path()));
  ASSERT_TRUE(l) << l.status().message();
  EXPECT_EQ(l->rows(), (std::vector<std::int64_t>{3, 0, 5}));
  EXPECT_EQ(l->offsets, (std::vector<std::int64_t>{0, 3, 3, 8}));
  EXPECT_EQ(l->shape(), (std::vector<std::int64_t>{8, 2}));
  EXPECT_EQ(l->row_bytes, 8u);
  EXPECT_EQ(l->total_bytes(), 64u);
  EXPECT_TRUE(l->shards[1].byte_swap);
  EXPECT_FALSE(l->shards[0].byte_swap);
  EXPECT_TRUE(l->shards[2].fortran_order);
  EXPECT_GT(l->shards[0].snapshot.size, 0u);
  EXPECT_NE(l->shards[0].snapshot.mtime_ns, 0);
  const std::string text = describe(*l);
  EXPECT_NE(text.find("shards:         3"), std::string::npos) << text;
  EXPECT_NE(text.find("(8, 2)"), std::string::npos) << text;
}

TEST_F(LayoutTest, FortranWithOneLongDimensionIsReadAsC) {
  shard(0, "<f4", "(7, 1)", 28, true);
  shard(1, "<f4", "(7,)", 28, true);
  auto l = try_discover(Source::directory(dir_.path()));
  ASSERT_FALSE(l) << "trailing shapes differ";
  shard(1, "<f4", "(7, 1)", 28, true);
  l = try_discover(Source::directory(dir_.path()));
  ASSERT_TRUE(l);
  EXPECT_FALSE(l->shards[0].fortran_order);
}

TEST_F(LayoutTest, DtypeMismatchNamesBoth) {
  shard(0, "<f4", "(3,)", 12);
  shard(1, "<f8", "(3,)", 24);
  const auto m = message();
  EXPECT_NE(m.find(dir_.file("shard_0001.npy") + ": dtype float64 differs from float32 of " +
                   dir_.file("shard_0000.npy")),
            std::string::npos)
      << m;
}

TEST_F(LayoutTest, TrailingShapeMismatchNamesBoth) {
  shard(0, "<i2", "(3, 4)", 24);
  shard(1, "<i2", "(3, 5)", 30);
  const auto m = message();
  EXPECT_NE(m.find(dir_.file("shard_0001.npy") + ": trailing shape (5,) differs from (4,)"),
            std::string::npos)
      << m;
}

TEST_F(LayoutTest, HeaderErrorsNameTheFile) {
  shard(0, "<f4", "(3,)", 12);
  testing::write_file(dir_.file("shard_0001.npy"), "garbage that is long enough to be read");
  const auto m = message();
  EXPECT_NE(m.find(dir_.file("shard_0001.npy") + ": header: not a .npy file"), std::string::npos)
      << m;
}

// A header may list any number of dimensions; more than numpy's 64 is refused
// at discovery, naming the file, rather than deep inside a read.
TEST_F(LayoutTest, MoreDimensionsThanNumpyAllows) {
  const auto ones = [](int n) {
    std::string s = "(";
    for (int i = 0; i < n; ++i) s += "1, ";
    return s + ")";
  };
  shard(0, "<f4", ones(64), 4);
  auto l = try_discover(Source::directory(dir_.path()));
  ASSERT_TRUE(l) << l.status().message();
  EXPECT_EQ(l->shape().size(), 64u);
  for (const int n : {65, 20000}) {  // 20000: what a version 1.0 header holds
    shard(0, "<f4", ones(n), 4);
    EXPECT_EQ(message(), dir_.file("shard_0000.npy") + ": shape: " + std::to_string(n) +
                             " dimensions, more than the 64 numpy allows");
  }
}

TEST_F(LayoutTest, NotARegularFile) {
  shard(0, "<f4", "(3,)", 12);
  ::mkdir(dir_.file("shard_0001.npy").c_str(), 0755);
  const auto m = message();
  EXPECT_NE(m.find(dir_.file("shard_0001.npy")), std::string::npos) << m;
  EXPECT_NE(m.find("not a regular file"), std::string::npos) << m;
}

// A FIFO would make a plain open() wait for a writer forever; the open must
// not block and the FIFO, a socket or a device is refused like a directory.
TEST_F(LayoutTest, FifoSocketOrDeviceIsRefusedWithoutBlocking) {
  shard(0, "<f4", "(3,)", 12);
  const std::string bad = dir_.file("shard_0001.npy");
  ASSERT_EQ(::mkfifo(bad.c_str(), 0644), 0);
  auto m = message();
  EXPECT_NE(m.find(bad + ": not a regular file"), std::string::npos) << m;
  EXPECT_EQ(posix_io().open(bad).status().message(), bad + ": not a regular file");

  ASSERT_EQ(::unlink(bad.c_str()), 0);
  const int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(s, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (bad.size() < sizeof(addr.sun_path)) {
    std::memcpy(addr.sun_path, bad.c_str(), bad.size() + 1);
    ASSERT_EQ(::bind(s, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)), 0);
    ::close(s);
    m = message();
    EXPECT_NE(m.find(bad + ": not a regular file"), std::string::npos) << m;
    ASSERT_EQ(::unlink(bad.c_str()), 0);
  } else {
    ::close(s);
  }

  ASSERT_EQ(::symlink("/dev/zero", bad.c_str()), 0);
  m = message();
  EXPECT_NE(m.find(bad + ": not a regular file"), std::string::npos) << m;
}

TEST_F(LayoutTest, FifoAfterDiscoveryIsARefusedRead) {
  shard(0, "<f4", "(3,)", 12);
  shard(1, "<f4", "(3,)", 12);
  auto l = try_discover(Source::directory(dir_.path()));
  ASSERT_TRUE(l) << l.status().message();
  const std::string bad = dir_.file("shard_0001.npy");
  ASSERT_EQ(::unlink(bad.c_str()), 0);
  ASSERT_EQ(::mkfifo(bad.c_str(), 0644), 0);
  std::vector<std::byte> out(l->total_bytes());
  const Status st = fill_rows(*l, 0, l->total_rows(), out.data());
  EXPECT_EQ(st.code(), ErrorCode::kIo) << st.message();
  EXPECT_NE(st.message().find(bad + ": not a regular file"), std::string::npos) << st.message();
}

TEST_F(LayoutTest, UnreadableFile) {
  if (::geteuid() == 0) {
    // root reads anything; a dangling symlink is the unreadable file then.
    shard(0, "<f4", "(3,)", 12);
    ASSERT_EQ(::symlink(dir_.file("gone").c_str(), dir_.file("shard_0001.npy").c_str()), 0);
    const auto m = message();
    EXPECT_NE(m.find(dir_.file("shard_0001.npy") + ": cannot open"), std::string::npos) << m;
    return;
  }
  shard(0, "<f4", "(3,)", 12);
  shard(1, "<f4", "(3,)", 12);
  ::chmod(dir_.file("shard_0001.npy").c_str(), 0);
  const auto m = message();
  EXPECT_NE(m.find("Permission denied"), std::string::npos) << m;
}

TEST_F(LayoutTest, ExplicitListKeepsOrder) {
  shard(0, "<u1", "(1,)", 1);
  shard(1, "<u1", "(2,)", 2);
  auto l = try_discover(Source::list({dir_.file("shard_0001.npy"), dir_.file("shard_0000.npy")}));
  ASSERT_TRUE(l);
  EXPECT_EQ(l->rows(), (std::vector<std::int64_t>{2, 1}));
}

TEST(LayoutAssemble, OverflowIsAnError) {
  std::vector<Shard> shards(2);
  shards[0].path = "a";
  shards[0].rows = INT64_MAX / 2;
  shards[1].path = "b";
  shards[1].rows = INT64_MAX / 2;
  auto l = assemble_layout(Format::kNpy, {}, *parse_dtype("float64"), {}, shards);
  ASSERT_FALSE(l);
  EXPECT_NE(l.status().message().find("overflows"), std::string::npos);
}

// A directory without a pattern: its numbered files of one format, told by the
// extension or, where there is none, by the magic bytes; what is there when nothing fits.
TEST_F(LayoutTest, AutoDiscoveryRecognisesWhatTheDirectoryHolds) {
  const std::string data(8, '\0');
  for (int i = 0; i < 3; ++i) {
    testing::write_file(dir_.file("part" + std::to_string(i)),
                        npy_bytes(npy_dict("<f4", false, "(2,)"), data));
  }
  testing::write_file(dir_.file("notes.txt"), "x");
  auto l = try_discover(Source::directory(dir_.path()));
  ASSERT_TRUE(l) << l.status().message();
  EXPECT_EQ(l->format, Format::kNpy);
  EXPECT_EQ(l->shards.size(), 3u);
  EXPECT_EQ(l->shards[2].path, dir_.file("part2"));
  EXPECT_EQ(sniff_format(dir_.file("notes.txt")), Format::kAuto);

  // A second numbered group of another format is ambiguous; both are named.
  testing::write_file(dir_.file("shard_0000.h5"), std::string("\x89HDF\r\n\x1a\n", 8));
  EXPECT_EQ(sniff_format(dir_.file("shard_0000.h5")), Format::kHdf5);
  const std::string m = message();
  EXPECT_NE(m.find("part{} (3 files, npy) and shard_{:04d}.h5 (1 file, hdf5)"), std::string::npos)
      << m;

  // The format named: its default naming, and what the directory holds when it is absent.
  auto named = try_discover(Source::directory(dir_.path()), DiscoverOptions{nullptr, [] {
                                                                              FormatOptions o;
                                                                              o.format =
                                                                                  Format::kParquet;
                                                                              return o;
                                                                            }()});
  ASSERT_FALSE(named);
  EXPECT_EQ(spell_options(named.status().message(), OptionSpelling::kNeutral),
            dir_.file("shard_{:04d}.parquet") +
                ": no files match the pattern; the directory holds 5 files: 1 *.h5 "
                "(shard_0000.h5), 4 other; pass the pattern 'part{}' or a glob '" +
                dir_.path() + "/part*'");
}

// A backend that serves each name's bytes from "<name>.real", as a store that is not the
// files discovery lists would: what the backend serves is what discovery must read.
class RedirectingIo final : public IoBackend {
 public:
  Result<int> open(const std::string& p) override { return posix_io().open(p + ".real"); }
  Result<FileInfo> stat(int fd, const std::string& p) override {
    return posix_io().stat(fd, p + ".real");
  }
  Result<FileInfo> stat_path(const std::string& p) override {
    return posix_io().stat_path(p + ".real");
  }
  std::int64_t pread(int fd, void* buf, std::size_t n, std::uint64_t off) override {
    return posix_io().pread(fd, buf, n, off);
  }
  void close(int fd) override { posix_io().close(fd); }
};

// The format of files without a known extension is sniffed through the injected backend, as
// their probes read: the listed files hold no format, the backend serves .npy bytes.
TEST_F(LayoutTest, SniffingReadsThroughTheInjectedBackend) {
  for (int i = 0; i < 2; ++i) {
    const std::string name = dir_.file("part" + std::to_string(i));
    testing::write_file(name, "not a format anyone knows");
    testing::write_file(name + ".real",
                        npy_bytes(npy_dict("<i2", false, "(3, 2)"), std::string(12, '\0')));
  }
  RedirectingIo io;
  DiscoverOptions options;
  options.io = &io;
  auto l = try_discover(Source::directory(dir_.path(), "part{}"), options);
  ASSERT_TRUE(l) << l.status().message();
  EXPECT_EQ(l->format, Format::kNpy);
  EXPECT_EQ(l->total_rows(), 6);
  EXPECT_EQ(sniff_format(dir_.file("part0")), Format::kAuto);  // the files themselves

  // A directory named alone: its numbered group's format is the backend's too.
  auto whole = try_discover(Source::directory(dir_.path()), options);
  ASSERT_TRUE(whole) << whole.status().message();
  EXPECT_EQ(whole->format, Format::kNpy);
  EXPECT_EQ(whole->shards.size(), 2u);
}

// Discovery says what the directory holds only when nothing matches, decided on what
// resolving found, not on the message: a directory whose name holds that very phrase, with a
// gap in its numbering, gets the gap error alone.
TEST(LayoutDiscovery, TheNothingMatchesCaseIsDecidedOnDataNotOnTheMessage) {
  testing::TempDir parent;
  const std::string dir = parent.file("odd: no files match the pattern");
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  for (const int i : {0, 2}) {
    testing::write_file(dir + "/" + NumberPattern{"shard_", 4, ".npy"}.format(i),
                        npy_bytes(npy_dict("<f4", false, "(1,)"), std::string(4, '\0')));
  }
  testing::write_file(dir + "/notes.txt", "x");
  const auto gap = try_discover(Source::directory(dir));
  ASSERT_FALSE(gap);
  EXPECT_EQ(gap.status().code(), ErrorCode::kLayout);
  EXPECT_EQ(gap.status().message(), dir +
                                        "/shard_{:04d}.npy: gap in the numbering: 1 of 3 files "
                                        "missing (shard_0001.npy)");

  bool nothing_matches = true;
  EXPECT_FALSE(resolve(Source::directory(dir), &nothing_matches));  // the gap
  EXPECT_FALSE(nothing_matches);
  nothing_matches = true;
  EXPECT_TRUE(resolve(Source::glob(dir + "/*.npy"), &nothing_matches));
  EXPECT_FALSE(nothing_matches);
  EXPECT_FALSE(resolve(Source::directory(dir, "part{}.npy"), &nothing_matches));
  EXPECT_TRUE(nothing_matches);
  EXPECT_FALSE(resolve(Source::glob(dir + "/*.h5"), &nothing_matches));
  EXPECT_TRUE(nothing_matches);
  EXPECT_FALSE(resolve(Source::directory(dir + "/missing"), &nothing_matches));
  EXPECT_FALSE(nothing_matches);
}

}  // namespace
}  // namespace shardload

namespace shardload {
namespace {

// The discovery option table: each row moves its field in and out by kind, a flag from its
// presence, a count from the one text parser, bounded by the row's maximum.
TEST(DiscoverOptionTable, RowsMoveTheirFieldsAndCheckTheirRange) {
  const auto find = [](std::string_view name) -> const DiscoverOptionSpec* {
    for (const auto& row : discover_option_table()) {
      if (name == row.name) return &row;
    }
    return nullptr;
  };
  const DiscoverOptionSpec* trust = find("trust_manifest");
  const DiscoverOptionSpec* threads = find("probe_threads");
  ASSERT_NE(trust, nullptr);
  ASSERT_NE(threads, nullptr);
  EXPECT_EQ(trust->kind, OptionKind::kFlag);
  EXPECT_EQ(trust->metavar, nullptr);
  EXPECT_EQ(threads->kind, OptionKind::kCount);

  DiscoverOptions o;
  EXPECT_FALSE(trust->get(o));
  EXPECT_FALSE(threads->get(o));
  ASSERT_TRUE(trust->set(OptionValue(true), &o));
  EXPECT_TRUE(o.trust_manifest);
  EXPECT_EQ(trust->get(o), std::optional<OptionValue>(true));
  ASSERT_TRUE(threads->set(parse_option_text(threads->kind, "1024").value(), &o));
  EXPECT_EQ(o.probe_threads, 1024u);
  EXPECT_EQ(threads->get(o), std::optional<OptionValue>(std::uint64_t{1024}));
  const Status over = threads->set(OptionValue(std::uint64_t{1025}), &o);
  EXPECT_EQ(over.code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(over.message(), "expected at most 1024, found 1025");
  EXPECT_EQ(o.probe_threads, 1024u);  // unchanged
  // 2**32 + 1 would wrap to 1 in an unsigned: refused, not truncated.
  EXPECT_FALSE(threads->set(OptionValue((std::uint64_t{1} << 32) + 1), &o));
  EXPECT_EQ(option_value_text(OptionValue(true), OptionKind::kFlag), "true");
  EXPECT_FALSE(parse_option_text(OptionKind::kFlag, "yes"));
}

}  // namespace
}  // namespace shardload
