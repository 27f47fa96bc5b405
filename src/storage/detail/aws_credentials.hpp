// Credentials of a role, for the signed s3:// path (s3_signed.hpp): those a container's
// credentials endpoint (ECS tasks, EKS Pod Identity) or the instance metadata service (an EC2
// instance profile) hands out, where the AWS SDK's default chain would get that far. They
// expire, so they are fetched again ahead of their expiry, while the requests using them go on.
#pragma once

#include <sys/types.h>

#include <ctime>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "storage/detail/sigv4.hpp"

namespace shardload::detail {

// Where role credentials come from, and how to ask for them again.
class RoleCredentials {
 public:
  // The credentials to sign with now: fetched again within five minutes of their expiry
  // (the old ones kept while a fetch fails: the store then says they expired).
  AwsCredentials current();

  // One fetch: false where the source did not answer with credentials.
  using Fetch = bool (*)(const std::string& where, AwsCredentials* out, std::time_t* expires);
  RoleCredentials(std::string where, Fetch fetch) : where_(std::move(where)), fetch_(fetch) {}
  bool fetch_now();

 private:
  std::string where_;  // the source's URL
  Fetch fetch_;
  std::mutex mu_;
  AwsCredentials creds_;
  std::time_t expires_ = 0;  // 0: never
  std::time_t last_try_ = 0;
  bool fetching_ = false;
  pid_t fetching_pid_ = 0;  // the process whose thread fetches
};

// The role credentials the default chain ends with: a container's credentials endpoint
// (AWS_CONTAINER_CREDENTIALS_RELATIVE_URI or _FULL_URI, with AWS_CONTAINER_AUTHORIZATION_TOKEN
// or _FILE), else the instance metadata service (IMDSv2, else v1; at
// AWS_EC2_METADATA_SERVICE_ENDPOINT or 169.254.169.254) unless AWS_EC2_METADATA_DISABLED is
// true. The caller asks only where nothing the chain takes first gives credentials. Null
// where the sources are switched off or do not answer. One answer per process: a source
// that did not answer is not asked again.
std::shared_ptr<RoleCredentials> role_credentials();

// Parses a credentials document of either source ({"AccessKeyId", "SecretAccessKey",
// "Token", "Expiration": "2026-12-03T18:30:00Z"}, an instance's with "Code": "Success"):
// false where it is not one.
bool parse_role_credentials(const std::string& text, AwsCredentials* out, std::time_t* expires);

// The value of an environment variable of the credentials chain; empty where it is unset (the
// SDKs treat an empty value as unset too).
std::string aws_env(const char* name);

}  // namespace shardload::detail
