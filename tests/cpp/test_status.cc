// Status: secrets in a URL's query never reach an error's message or path.
#include <gtest/gtest.h>

#include <string>

#include "shardload/status.hpp"

namespace shardload {
namespace {

TEST(RedactSecrets, StoreOptionsSecretsAreHiddenAndTheRestKept) {
  const std::string url =
      "s3://b/d/x.npy?endpoint_override=h%3A1&access_key=AKID&secret_key=wJal%2Fr+X&"
      "session_token=FQo%3D%3D&region=us-east-1";
  EXPECT_EQ(redact_secrets(url),
            "s3://b/d/x.npy?endpoint_override=h%3A1&access_key=AKID&secret_key=***&"
            "session_token=***&region=us-east-1");
}

TEST(RedactSecrets, PresignedSignaturesAreHiddenWithoutRegardToCase) {
  EXPECT_EQ(redact_secrets("https://h/o?X-Amz-Credential=AK%2F1&X-Amz-Signature=abc123&"
                           "x-amz-security-token=tok: HTTP 403"),
            "https://h/o?X-Amz-Credential=AK%2F1&X-Amz-Signature=***&"
            "x-amz-security-token=***: HTTP 403");
  EXPECT_EQ(redact_secrets("'https://a.blob/c?sv=1&sig=S%2B1' and https://g/o?X-Goog-Signature=ff"),
            "'https://a.blob/c?sv=1&sig=***' and https://g/o?X-Goog-Signature=***");
}

TEST(RedactSecrets, OnlyWholeQueryKeysAreSecrets) {
  // Not after '?' or '&', or a longer key ending in a secret's name: left as it is.
  for (const std::string text :
       {"my_secret_key=1", "s3://b/k?not_secret_key=1&xsig=2", "a secret_key=v", "sig=1",
        "s3://b/k?secret_key", "s3://b/k?secret_key=", "no query at all"}) {
    EXPECT_EQ(redact_secrets(text), text);
  }
}

TEST(RedactSecrets, EveryStatusMessageContextAndPathIsRedacted) {
  const std::string url = "s3://b/k?region=r&secret_key=hunter2";
  const Status s = file_error(ErrorCode::kIo, url, "HTTP 403", 13)
                       .with_context("loading s3://b/?secret_key=hunter2&region=r");
  EXPECT_EQ(s.message(),
            "loading s3://b/?secret_key=***&region=r: s3://b/k?region=r&secret_key=***: HTTP 403");
  EXPECT_EQ(s.path(), "s3://b/k?region=r&secret_key=***");
  EXPECT_EQ(s.sys_errno(), 13);
  EXPECT_EQ(s.message().find("hunter2"), std::string::npos);
}

TEST(MessageAfterPath, StripsThePathAsTheMessageShowsIt) {
  const std::string url = "s3://b/k?secret_key=longer-than-its-stars";
  EXPECT_EQ(message_after_path(file_error(ErrorCode::kIo, url, "cannot open: HTTP 403"), url),
            "cannot open: HTTP 403");
  const std::string nul = std::string("/d/a") + '\0' + "b";
  EXPECT_EQ(message_after_path(Status(ErrorCode::kIo, "/d/a\\0b: gone"), nul), "gone");
  // Another path's message is left whole.
  EXPECT_EQ(message_after_path(file_error(ErrorCode::kIo, "/x", "gone"), "/y"), "/x: gone");
}

}  // namespace
}  // namespace shardload
