// The credentials documents of a container's endpoint and of the instance metadata service
// (storage/detail/aws_credentials.hpp), as AWS documents them.
#include <gtest/gtest.h>

#include "storage/detail/aws_credentials.hpp"

namespace shardload::detail {
namespace {

TEST(RoleCredentials, AnInstanceDocumentGivesKeysTokenAndExpiry) {
  AwsCredentials c;
  std::time_t expires = 0;
  ASSERT_TRUE(parse_role_credentials(
      R"({"Code": "Success", "LastUpdated": "2026-12-03T12:00:00Z", "Type": "AWS-HMAC",
          "AccessKeyId": "ASIAEXAMPLE", "SecretAccessKey": "secret", "Token": "token",
          "Expiration": "2026-12-03T18:30:05Z"})",
      &c, &expires));
  EXPECT_EQ(c.access_key, "ASIAEXAMPLE");
  EXPECT_EQ(c.secret_key, "secret");
  EXPECT_EQ(c.session_token, "token");
  EXPECT_EQ(expires, std::time_t{1796322605});  // date -u -d 2026-12-03T18:30:05Z +%s
}

TEST(RoleCredentials, AContainerDocumentWithFractionalSecondsAndNoCode) {
  AwsCredentials c;
  std::time_t expires = 0;
  ASSERT_TRUE(parse_role_credentials(
      R"({"AccessKeyId": "A", "SecretAccessKey": "S", "Token": "T",
          "Expiration": "2026-12-03T18:30:05.123Z", "RoleArn": "arn:aws:iam::1:role/r"})",
      &c, &expires));
  EXPECT_EQ(expires, std::time_t{1796322605});
  // No expiry: long-lived keys, never fetched again.
  ASSERT_TRUE(
      parse_role_credentials(R"({"AccessKeyId": "A", "SecretAccessKey": "S"})", &c, &expires));
  EXPECT_EQ(expires, 0);
  EXPECT_EQ(c.session_token, "");
}

TEST(RoleCredentials, WhatIsNotADocumentOfCredentialsIsRefused) {
  AwsCredentials c{"keep", "keep", ""};
  std::time_t expires = 7;
  for (
      const char* text : {
          "",
          "not json",
          "[]",
          R"({"Code": "AssumeRoleUnauthorizedAccess", "AccessKeyId": "A", "SecretAccessKey": "S"})",
          R"({"AccessKeyId": "A"})",
          R"({"AccessKeyId": "", "SecretAccessKey": "S"})",
          R"({"AccessKeyId": 5, "SecretAccessKey": "S"})",
          R"({"AccessKeyId": "A", "SecretAccessKey": "S", "Expiration": "tomorrow"})",
          // A value that would add header lines to every signed request.
          R"({"AccessKeyId": "A", "SecretAccessKey": "S", "Token": "T\r\nX-Injected: 1"})",
          R"({"AccessKeyId": "A\n", "SecretAccessKey": "S"})",
          R"({"AccessKeyId": "A", "SecretAccessKey": "S\u0000"})",
      }) {
    EXPECT_FALSE(parse_role_credentials(text, &c, &expires)) << text;
  }
  EXPECT_EQ(c.access_key, "keep");  // untouched by a refusal
  EXPECT_EQ(expires, 7);
}

}  // namespace
}  // namespace shardload::detail
