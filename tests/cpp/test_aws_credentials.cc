// The credentials documents of a container's endpoint and of the instance metadata service
// (storage/detail/aws_credentials.hpp), as AWS documents them.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "shardload/interrupt.hpp"
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

TEST(CredentialProcess, ItsOutputAndItsExitStatusAreWhatItGave) {
  std::string failed;
  EXPECT_EQ(run_credential_process("printf '{\"Version\": 1}'", 10, &failed), R"({"Version": 1})");
  EXPECT_EQ(failed, "");
  EXPECT_EQ(run_credential_process("echo partial; exit 3", 10, &failed), "partial\n");
  EXPECT_EQ(failed, "it exited with status 3");
}

// A process that never answers (a prompt nobody sees) held the load for ever, past a Ctrl-C.
TEST(CredentialProcess, OneThatDoesNotAnswerIsEndedAtItsDeadline) {
  std::string failed;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(run_credential_process("sleep 30", 0.5, &failed), "");
  EXPECT_EQ(failed, "it gave no answer within 0.5 s, and was ended");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

TEST(CredentialProcess, OneStillRunningAtACtrlCIsEnded) {
  std::string failed;
  const auto start = std::chrono::steady_clock::now();
  std::thread ctrl_c([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    request_interrupt();
  });
  // What the shell started too: its output pipe would otherwise stay open.
  const std::string got = run_credential_process("sleep 30 & wait", 60, &failed);
  ctrl_c.join();
  clear_interrupt();
  EXPECT_EQ(got, "");
  EXPECT_EQ(failed, "it was ended by the interrupt");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

}  // namespace
}  // namespace shardload::detail
