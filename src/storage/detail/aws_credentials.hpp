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

  // One fetch: false where the source did not answer with credentials, saying why in `why`
  // (never a credential's value).
  using Fetch = bool (*)(const std::string& where, AwsCredentials* out, std::time_t* expires,
                         std::string* why);
  RoleCredentials(std::string where, Fetch fetch) : where_(std::move(where)), fetch_(fetch) {}
  bool fetch_now(std::string* why = nullptr);

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
// true. The caller asks only where nothing the chain takes first gives credentials.
// `found` null where the sources are switched off or the instance's does not answer (one
// answer per process: that source is not asked again). A container's endpoint named by the
// environment that is refused (a plain-http host the SDKs refuse) or that answers with no
// credentials (an error, a redirect, which is not followed, a document that is none) gives
// `refused`, saying why: the caller stops there, as handing the same source to the AWS SDK's
// chain would follow its redirect and sign with what the other host gave. Not kept: the next
// call asks again.
struct RoleLookup {
  std::shared_ptr<RoleCredentials> found;
  std::string refused;
};
RoleLookup role_credentials();

// The credentials of the profile's `credential_process` (the shared config file's), run as
// the AWS SDK for C++ runs it (through /bin/sh, its standard output read) and its output
// parsed as the AWS CLI documents it: {"Version": 1, "AccessKeyId", "SecretAccessKey",
// "SessionToken", "Expiration"}; run again near the expiry where one is given. shardload runs
// it itself, rather than leaving it to Arrow's client, because the AWS SDK's headers are not
// shipped with pyarrow: what the SDK's chain resolves cannot be seen before it signs, and a
// value holding a control character went into every request's headers. `refused` says why
// where it gave none (its exit status, output that is no such document, a value holding a
// control character: named by the field and the byte, never the value); `profile` names it.
// A failure is given again, without a new run, for 10 s after it (one load's requests each ask,
// and a helper that prompts would prompt for each), unless a Ctrl-C ended the run.
RoleLookup process_credentials(const std::string& command, const std::string& profile);

// Runs `command` through /bin/sh and returns its standard output (up to 64 KiB); `failed` says
// why where it gave none: its exit status, a signal, output too long, no answer within
// `seconds` or a Ctrl-C meanwhile (then it and what it started are killed).
std::string run_credential_process(const std::string& command, double seconds, std::string* failed);

// Parses a credentials document of either source ({"AccessKeyId", "SecretAccessKey",
// "Token", "Expiration": "2026-12-03T18:30:00Z"}, an instance's with "Code": "Success"):
// false where it is not one.
bool parse_role_credentials(const std::string& text, AwsCredentials* out, std::time_t* expires,
                            std::string* why = nullptr);

// The value of an environment variable of the credentials chain; empty where it is unset (the
// SDKs treat an empty value as unset too).
std::string aws_env(const char* name);

// A file the AWS SDK reads: the variable's path (AWS_SHARED_CREDENTIALS_FILE,
// AWS_CONFIG_FILE), else ~/.aws/NAME ("" without HOME).
std::string aws_file(const char* variable, const char* name);

}  // namespace shardload::detail
