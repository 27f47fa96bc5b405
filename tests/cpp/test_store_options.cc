// The store option table (shardload/store_options.hpp) and the query parser that derives from
// it: every row with a field is taken out of the query by its kind and range, Arrow's rows are
// left for Arrow, the stores a row names are the ones whose query it is taken from, and the
// secret rows are what redact_secrets hides.
#include <gtest/gtest.h>

#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/detail/secrets.hpp"
#include "shardload/status.hpp"
#include "shardload/store_options.hpp"
#include "storage/detail/store_options.hpp"

namespace shardload {
namespace {

// A value of `row`'s kind that its range takes, as the query spells it, and that differs from
// the default.
std::string valid_text(const StoreOptionSpec& row) {
  switch (row.kind) {
    case OptionKind::kCount:
      return std::to_string(row.hi);
    case OptionKind::kNumber:
      return "0.25";
    case OptionKind::kFlag:
      return "true";
    default:
      // A region goes into a host name: a name of its own, not any text.
      if (std::string_view(row.name) == "region") return "eu-west-1";
      return "v%2Fw";  // percent-decoded to "v/w"
  }
}

OptionValue expected_value(const StoreOptionSpec& row) {
  switch (row.kind) {
    case OptionKind::kCount:
      return OptionValue(static_cast<std::uint64_t>(row.hi));
    case OptionKind::kNumber:
      return OptionValue(0.25);
    case OptionKind::kFlag:
      return OptionValue(true);
    default:
      return OptionValue(std::string("v/w"));
  }
}

TEST(StoreOptionTable, NamesAreUniqueAndFindable) {
  std::set<std::string> names;
  for (const auto& row : store_option_table()) {
    EXPECT_TRUE(names.insert(row.name).second) << row.name;
    EXPECT_EQ(find_store_option(row.name), &row);
    EXPECT_EQ(row.get == nullptr, row.set == nullptr) << row.name;
    EXPECT_NE(row.stores, 0u) << row.name;
  }
  EXPECT_EQ(find_store_option("no_such_option"), nullptr);
}

TEST(StoreOptionTable, EveryRowWithAFieldIsTakenOutOfAnS3QueryByItsKind) {
  for (const auto& row : store_option_table()) {
    if (row.set == nullptr) continue;
    SCOPED_TRACE(row.name);
    StoreOptions o;
    const std::string query = std::string("?") + row.name + "=" + valid_text(row) + "&region=x";
    auto rest = detail::take_store_options("s3://b/k", query, &o, /*credentials=*/true);
    ASSERT_TRUE(rest.is_ok()) << rest.status().message();
    EXPECT_EQ(*rest, "?region=x");
    EXPECT_EQ(row.get(o), expected_value(row));
    EXPECT_NE(row.get(StoreOptions{}), expected_value(row));  // the default was changed
  }
}

TEST(StoreOptionTable, ArrowsRowsStayInTheQueryForArrow) {
  std::string query;
  for (const auto& row : store_option_table()) {
    if (row.set != nullptr) continue;
    query += (query.empty() ? "?" : "&") + std::string(row.name) + "=" + valid_text(row);
  }
  ASSERT_FALSE(query.empty());
  StoreOptions o;
  auto rest = detail::take_store_options("s3://b/k", query, &o, /*credentials=*/true);
  ASSERT_TRUE(rest.is_ok()) << rest.status().message();
  EXPECT_EQ(*rest, query);
}

TEST(StoreOptionTable, AnHttpQueryGivesTheServerWhatHttpDoesNotTake) {
  for (const auto& row : store_option_table()) {
    SCOPED_TRACE(row.name);
    StoreOptions o;
    const std::string query = std::string("?") + row.name + "=" + valid_text(row);
    auto rest = detail::take_store_options("http://h/k", query, &o);
    ASSERT_TRUE(rest.is_ok()) << rest.status().message();
    const bool taken = row.set != nullptr && (row.stores & kStoreHttp) != 0;
    EXPECT_EQ(*rest, taken ? "" : query);
    if (row.get != nullptr && !taken) EXPECT_EQ(row.get(o), row.get(StoreOptions{}));
  }
}

TEST(StoreOptionTable, AValueOutsideItsRowsRangeIsRefusedNamingTheKeyAndTheRange) {
  for (const auto& row : store_option_table()) {
    if (row.set == nullptr) continue;
    SCOPED_TRACE(row.name);
    std::string bad;
    std::string expected;
    switch (row.kind) {
      case OptionKind::kCount:
        bad = std::to_string(row.hi + 1);
        expected = std::string(row.name) + " must be an integer from " + std::to_string(row.lo) +
                   " to " + std::to_string(row.hi) + ", found '" + bad + "'";
        break;
      case OptionKind::kNumber:
        bad = "0";
        expected = std::string(row.name) + " must be a number of seconds above 0 (at most " +
                   std::to_string(row.hi) + "), found '0'";
        break;
      case OptionKind::kFlag:
        bad = "yes";
        expected = std::string(row.name) + " must be true or false, found 'yes'";
        break;
      default:
        continue;  // any text is a value
    }
    StoreOptions o;
    auto rest =
        detail::take_store_options("s3://b/k", "?" + std::string(row.name) + "=" + bad, &o, true);
    ASSERT_FALSE(rest.is_ok());
    EXPECT_EQ(rest.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(rest.status().message().find("s3://b/k"), std::string::npos)
        << rest.status().message();
    EXPECT_NE(rest.status().message().find(expected), std::string::npos) << rest.status().message();
    if (row.kind == OptionKind::kCount && row.lo > 0) {
      auto low = detail::take_store_options(
          "s3://b/k", "?" + std::string(row.name) + "=" + std::to_string(row.lo - 1), &o, true);
      EXPECT_FALSE(low.is_ok());
    }
  }
}

// One check of a region's name, with the alphabet of its source: the store options take the
// custom names of S3-compatible servers too (upper case, '_'); a region the S3 client reads
// from a server's answer is offered only when it is one of AWS's.
TEST(RegionName, OneCheckWithTheAlphabetOfItsSource) {
  using detail::is_region_name;
  using detail::kAwsRegionChars;
  using detail::kRegionChars;
  EXPECT_TRUE(is_region_name("eu-west-1", kAwsRegionChars));
  EXPECT_TRUE(is_region_name("eu-west-1", kRegionChars));
  EXPECT_TRUE(is_region_name(std::string(63, 'z'), kAwsRegionChars));
  EXPECT_FALSE(is_region_name("My_Region-2", kAwsRegionChars));
  EXPECT_TRUE(is_region_name("My_Region-2", kRegionChars));
  for (const std::string bad :
       {std::string(), std::string(64, 'a'), std::string("x@h:1/#"), std::string("evil.example/"),
        std::string("a b"), std::string("a\nb"), std::string("r%40h")}) {
    SCOPED_TRACE(bad);
    EXPECT_FALSE(is_region_name(bad, kAwsRegionChars));
    EXPECT_FALSE(is_region_name(bad, kRegionChars));
  }
  // The option's parse: a custom name and an empty value (the default) are taken; a character
  // that could name another host is refused naming the URL.
  StoreOptions o;
  for (const char* ok : {"?region=My_Region-2", "?region="}) {
    auto rest = detail::take_store_options("s3://b/k", ok, &o, true);
    ASSERT_TRUE(rest.is_ok()) << ok << ": " << rest.status().message();
    EXPECT_EQ(*rest, ok);
  }
  auto bad = detail::take_store_options("s3://b/k", "?region=x%40h%3A1", &o, true);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("s3://b/k"), std::string::npos);
  EXPECT_NE(bad.status().message().find("region must be a region's name"), std::string::npos)
      << bad.status().message();
}

TEST(StoreOptionTable, TheSecretRowsAreTheOnesRedactSecretsHides) {
  for (const auto& row : store_option_table()) {
    SCOPED_TRACE(row.name);
    EXPECT_EQ(detail::is_secret_query_key(row.name), row.secret);
    const std::string url = std::string("s3://b/k?") + row.name + "=S3cr3tValue";
    EXPECT_EQ(redact_secrets(url).find("S3cr3tValue") == std::string::npos, row.secret);
  }
}

// The credentials table (seal_credentials): an entry lives while a pin holds it, besides among
// the kRecentlySealed sealed last; then its handle is forgotten.

// The last handle `sealed` names (the one sealing it gave).
std::string handle_in(const std::string& sealed) {
  std::vector<std::string> handles;
  credential_handles(sealed, &handles);
  EXPECT_FALSE(handles.empty()) << sealed;
  return handles.empty() ? std::string() : handles.back();
}

// A distinct signature as a signer spells one, 64 letters and digits: the tests seal them by
// the thousand, and a short one would cost scrypt's key each (store_options.hpp).
std::string signature(const std::string& tag, std::size_t i) {
  std::string s = tag + std::to_string(i);
  return std::string(s.size() < 64 ? 64 - s.size() : 0, '0') + s;
}

// Seals `n` distinct presigned URLs, keeping none.
void seal_and_drop(std::size_t n, const std::string& tag) {
  for (std::size_t i = 0; i < n; ++i) {
    seal_credentials("https://h/x.npy?X-Amz-Signature=" + signature(tag, i));
  }
}

TEST(CredentialTable, AnEntryLivesWhileAPinHoldsItThenAmongTheRecentOnesOnly) {
  CredentialPins pins;
  const std::string s3 =
      seal_credentials("s3://b/k?endpoint_override=h:1&access_key=A&secret_key=S1", &pins);
  const std::string http = seal_credentials("https://u:p1@h/x?sig=1", &pins);
  // Sealed again with a password added: the new entry names the first one, kept with it.
  const std::string again = seal_credentials("https://v:p2@h/x?" + http.substr(http.find('?') + 1));
  const std::string outer = handle_in(again);
  const std::string inner = handle_in(http);
  ASSERT_NE(credential_items(inner), "");
  seal_and_drop(kRecentlySealed + 10, "a");
  EXPECT_EQ(credential_items(handle_in(s3)),
            credential_items(handle_in(
                seal_credentials("s3://b/k?endpoint_override=h:1&access_key=A&secret_key=S1"))));
  EXPECT_NE(credential_items(inner), "");
  EXPECT_EQ(credential_items(outer), "");  // only a string named it
  pins.clear();
  EXPECT_EQ(credential_items(inner), "");          // neither pinned nor among the recent ones
  EXPECT_NE(credential_items(handle_in(s3)), "");  // among them: sealed again above
  seal_and_drop(kRecentlySealed + 10, "b");
  EXPECT_EQ(credential_items(handle_in(s3)), "");
  EXPECT_LE(credential_entries(), kRecentlySealed + 64);

  // A handle inside another entry's span (secret items sealed around a sealed URL's handle) is
  // pinned by that entry while it is.
  CredentialPins outer_pins;
  const std::string http2 = seal_credentials("https://u:p3@h/x?sig=3");
  const std::string around = seal_credentials(
      "https://h/x?sig=4&" + http2.substr(http2.find('?') + 1) + "&token=5", &outer_pins);
  EXPECT_EQ(around.find(handle_in(http2)), std::string::npos) << around;
  seal_and_drop(kRecentlySealed + 10, "c");
  EXPECT_NE(credential_items(handle_in(http2)), "");
  outer_pins.clear();
  seal_and_drop(kRecentlySealed + 10, "d");
  EXPECT_EQ(credential_items(handle_in(http2)), "");
}

TEST(CredentialTable, APinOfAnEntryPinsTheEntriesItNamesWhicheverCameFirst) {
  // As a decoded layout adopts them: the entry that names another before that other.
  const std::string inner = seal_credentials("https://u:p6@h/x?sig=6");
  const std::string around =
      seal_credentials("https://h/x?sig=7&" + inner.substr(inner.find('?') + 1) + "&token=8");
  const std::string inner_items = credential_items(handle_in(inner));
  const std::string around_items = credential_items(handle_in(around));
  seal_and_drop(kRecentlySealed + 10, "h");
  ASSERT_EQ(credential_items(handle_in(inner)), "");
  ASSERT_TRUE(adopt_credentials(handle_in(around), around_items).is_ok());
  ASSERT_TRUE(adopt_credentials(handle_in(inner), inner_items).is_ok());
  CredentialPins pins;
  pin_credentials(around, &pins);
  seal_and_drop(kRecentlySealed + 10, "i");
  EXPECT_EQ(credential_items(handle_in(around)), around_items);
  EXPECT_EQ(credential_items(handle_in(inner)), inner_items);
}

TEST(CredentialTable, AChainOfEntriesEachNamingTheOneBeforeIsFreedWithoutRecursion) {
  // Each URL sealed around the handle of the one before: the entries pin each other in a
  // chain, freed when the newest leaves the recently sealed ones. On a thread of 256 KiB of
  // stack, a deleter inside a deleter per link overflowed it long before 20,000 links.
  constexpr int kLinks = 20000;
  bool freed = false;
  const auto work = [&] {
    std::string url = seal_credentials("https://h/x.npy?sig=first");
    const std::string first = handle_in(url);
    for (int i = 1; i < kLinks; ++i) {
      url = seal_credentials("https://h/x.npy?sig=" + signature("A", i) + "&" +
                             url.substr(url.find('?') + 1) + "&sig=" + signature("B", i));
    }
    const bool held = !credential_items(first).empty();  // the chain keeps its first link
    seal_and_drop(kRecentlySealed + 10, "chain");
    freed = held && credential_items(first).empty();
  };
  pthread_attr_t attr;
  ASSERT_EQ(pthread_attr_init(&attr), 0);
  ASSERT_EQ(pthread_attr_setstacksize(&attr, 256 << 10), 0);
  pthread_t thread;
  ASSERT_EQ(pthread_create(
                &thread, &attr,
                [](void* f) -> void* {
                  (*static_cast<decltype(work)*>(f))();
                  return nullptr;
                },
                const_cast<void*>(static_cast<const void*>(&work))),
            0);
  pthread_join(thread, nullptr);
  pthread_attr_destroy(&attr);
  EXPECT_TRUE(freed);
  EXPECT_LE(credential_entries(), kRecentlySealed + 64);
}

TEST(CredentialTable, TheRecentOnesAreBoundedInBytesTooTheLastAlwaysKept) {
  const std::string big(kRecentlySealedBytes + 1, 'x');
  const std::string sealed = seal_credentials("https://h/x?sig=" + big);
  EXPECT_NE(credential_items(handle_in(sealed)), "");
  seal_credentials("https://h/x?sig=2" + big);
  EXPECT_EQ(credential_items(handle_in(sealed)), "");
}

// Each parsed s3:// query holds its credentials: a process given new ones again and again
// keeps a few MiB of them, not every set it was ever given.
TEST(CredentialTable, TheParsedQueriesKeptHoldAFewMiBOfSecretsAtMost) {
  const std::string big(16 << 10, 'k');
  for (int i = 0; i < 2000; ++i) {
    const std::string secret = std::to_string(i) + big;
    const std::string url =
        seal_credentials("s3://b/k?endpoint_override=h:1&access_key=A&secret_key=" + secret);
    const auto parsed = detail::parsed_store_query(url, url.substr(url.find('?')), true);
    ASSERT_TRUE(parsed.is_ok()) << parsed.status().message();
    EXPECT_EQ((*parsed)->options.secret_key, secret);
    EXPECT_EQ(detail::parsed_store_query(url, url.substr(url.find('?')), true)->get(),
              parsed->get());  // kept
  }
  EXPECT_LE(detail::parsed_queries_bytes(), (4u << 20) + big.size() + 1000);
}

TEST(CredentialTable, ThreadsSealingAtOnceKeepWhatTheyPin) {
  constexpr int kThreads = 4;
  constexpr int kEach = 3000;
  std::vector<CredentialPins> pins(kThreads);
  std::vector<std::vector<std::pair<std::string, std::string>>> kept(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        const std::string tag = std::to_string(t) + "-" + std::to_string(i);
        if (i % 10 == 0) {
          const std::string s3 =
              "s3://b/k?endpoint_override=h:1&access_key=A&secret_key=S" + signature(tag, 0);
          kept[t].emplace_back(s3, seal_credentials(s3, &pins[t]));
          // Its own pin and another thread's drops of the same handle race the table.
          seal_credentials(s3);
        } else {
          seal_and_drop(1, tag + "-");
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    for (const auto& [url, sealed] : kept[t]) {
      const std::string items = credential_items(handle_in(sealed));
      ASSERT_NE(items.find("secret_key=" + url.substr(url.rfind("=S") + 1)), std::string::npos)
          << url;
    }
  }
  pins.clear();
  seal_and_drop(kRecentlySealed + 10, "e");
  EXPECT_LE(credential_entries(), kRecentlySealed + 64);
}

TEST(CredentialTable, AForkedChildHoldsWhatTheParentPinned) {
  CredentialPins pins;
  const std::string sealed = seal_credentials("https://u:p5@h/x?sig=5", &pins);
  const std::string handle = handle_in(sealed);
  seal_and_drop(kRecentlySealed + 10, "f");
  const pid_t pid = ::fork();
  if (pid == 0) {
    // The child drops its copy of the pin: the entry goes after newer ones, as in the parent.
    const bool held = !credential_items(handle).empty();
    pins.clear();
    seal_and_drop(kRecentlySealed + 10, "g");
    ::_exit(held && credential_items(handle).empty() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_NE(credential_items(handle), "");
}

// One ETag as a store's PUT, HEAD and GET answers may spell it: one form, and AWS's own
// spelling is that form (the hashes of snapshots kept in manifests do not change).
TEST(EtagForm, SpellingsOfOneTagAreTheSameAndAwsSpellingIsItsOwnForm) {
  const std::string aws = "\"0b7eb34a1b56aeccc50212c6e47396a7\"";
  EXPECT_EQ(detail::normalized_etag(aws), aws);
  EXPECT_EQ(detail::etag_hash(aws), detail::fnv1a(aws));
  for (const char* other :
       {"0b7eb34a1b56aeccc50212c6e47396a7", "\"0B7EB34A1B56AECCC50212C6E47396A7\"",
        "W/\"0b7eb34a1b56aeccc50212c6e47396a7\"", " \"0b7eb34a1b56aeccc50212c6e47396a7\" "}) {
    EXPECT_TRUE(detail::same_etag(other, aws)) << other;
    EXPECT_EQ(detail::etag_hash(other), detail::etag_hash(aws)) << other;
  }
  // A multipart upload's tag folds too; another tag's case is significant (RFC 9110).
  EXPECT_TRUE(detail::same_etag("\"ABC123-3\"", "\"abc123-3\""));
  EXPECT_FALSE(detail::same_etag("\"Version-A\"", "\"version-a\""));
  EXPECT_FALSE(detail::same_etag("\"0b7e\"", "\"0b7f\""));
  // No ETag stays none: it equals only none, and hashes as before.
  EXPECT_EQ(detail::normalized_etag(""), "");
  EXPECT_FALSE(detail::same_etag("", "\"\""));
  EXPECT_EQ(detail::etag_hash(""), detail::fnv1a(""));
}

}  // namespace
}  // namespace shardload
