#include "storage/detail/aws_credentials.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <map>
#include <optional>
#include <sstream>
#include <vector>

#include "base/detail/environment.hpp"
#include "base/detail/json.hpp"
#include "shardload/interrupt.hpp"
#include "storage/detail/curl_get.hpp"
#include "storage/detail/store_options.hpp"

namespace shardload::detail {

namespace {

// A credentials document is a few hundred bytes; a metadata answer past this is no such thing.
constexpr std::size_t kMaxAnswer = 64 * 1024;

// The longest a credential_process may take: long enough for a helper that asks for a second
// factor on the terminal, short enough that a hung one is an error the user sees.
constexpr double kProcessSeconds = 120;

// The options of a request to a credentials source: the SDKs' one second to connect (an
// instance's service is a link-local address that answers at once, or nothing is there), a
// few seconds to answer, one attempt (a refresh that fails is tried again ten seconds later).
StoreOptions source_options() {
  StoreOptions o;
  o.max_attempts = 1;
  o.connect_timeout = 1;
  o.request_timeout = 5;
  return o;
}

// One request's answer: whether the source answered at all, and its body where it was a 200
// (else what it answered, in words).
struct Answer {
  bool answered = false;
  bool redirect = false;  // a 3xx, not followed
  std::optional<std::string> body;
  std::string what;
};

Answer ask(const std::string& url, const char* method, std::vector<std::string> headers) {
  if (!curl_init(url)) return {};
  static const StoreOptions options = source_options();
  CurlRequest req;
  req.url = url;
  req.options = &options;
  req.method = method;
  req.follow_redirects = false;
  req.direct = true;
  req.headers = [headers = std::move(headers)] { return headers; };
  std::string body(kMaxAnswer, '\0');
  const CurlAnswer a = curl_perform(req, body.data(), body.size(), 0, nullptr);
  Answer out;
  out.answered = a.outcome.curl == CURLE_OK || a.outcome.http != 0;
  if (a.overflow) {
    out.what = "an answer longer than " + std::to_string(kMaxAnswer) + " bytes";
    return out;
  }
  if (a.outcome.curl != CURLE_OK || a.outcome.http != 200) {
    out.what = curl_describe(a.outcome, {});
    if (a.outcome.curl == CURLE_OK && a.outcome.http >= 300 && a.outcome.http < 400) {
      out.what += " (a redirect: not followed)";
      out.redirect = true;
    }
    return out;
  }
  body.resize(a.got);
  out.body = std::move(body);
  return out;
}

// "2026-12-03T18:30:00Z" (or with fractional seconds, or "+00:00"): seconds since the epoch,
// or 0 where it is not such a time.
std::time_t parse_utc(const std::string& s) {
  std::tm tm{};
  std::istringstream in(s);
  in >> std::get_time(&tm, "%Y-%m-%dT%H:%M:%S");
  if (in.fail()) return 0;
  return timegm(&tm);
}

// The token a container's credentials endpoint is asked with: the file
// AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE names (read at each fetch: EKS Pod Identity rotates
// it), else the variable AWS_CONTAINER_AUTHORIZATION_TOKEN (checked with the environment's
// other credentials). The file's one trailing line end is no part of the token (a file written
// with CR LF, a secret made from a file); any other control character or one beyond ASCII is
// refused as the variable's is, naming the file, never the token: a CR added a header line to
// the endpoint's request, a NUL cut the token short, a non-ASCII byte went out raw. `refused`
// says why where there is none to send.
bool container_token(std::string* token, std::string* refused) {
  *token = aws_env("AWS_CONTAINER_AUTHORIZATION_TOKEN");
  const std::string file = aws_env("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
  if (file.empty()) return true;
  const std::string named = "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE (environment) " + file;
  // Opened without waiting: a FIFO no one writes held the load in open() for good.
  const int fd = ::open(file.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    *refused = named + " cannot be read: " + std::strerror(errno);
    return false;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const int err = errno;
    ::close(fd);
    *refused = named + (S_ISREG(st.st_mode) || st.st_mode == 0
                            ? " cannot be read: " + std::string(std::strerror(err))
                            : std::string(" is not a regular file (a FIFO, device, socket or "
                                          "directory): a token file is one"));
    return false;
  }
  std::string text(kMaxAnswer + 1, '\0');
  std::size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      *refused = named + " cannot be read: " + std::strerror(err);
      return false;
    }
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  ::close(fd);
  text.resize(got);
  if (text.size() > kMaxAnswer) {
    *refused =
        named + " is longer than " + std::to_string(kMaxAnswer) + " bytes: no token is that long";
    return false;
  }
  if (text.ends_with("\r\n")) {
    text.resize(text.size() - 2);
  } else if (text.ends_with('\n')) {
    text.pop_back();
  }
  if (const CredentialCharacter bad = bad_credential_character(text); !bad.kind.empty()) {
    *refused = named + " holds " + bad.kind + " (" + bad.code + "; " + bad.why() + ")";
    return false;
  }
  *token = std::move(text);
  return true;
}

bool fetch_container(const std::string& url, AwsCredentials* out, std::time_t* expires,
                     std::string* why) {
  std::vector<std::string> headers;
  std::string token;
  if (!container_token(&token, why)) return false;
  if (!token.empty()) headers.push_back("Authorization: " + token);
  const Answer a = ask(url, nullptr, headers);
  if (!a.body) {
    *why = a.what;
    return false;
  }
  return parse_role_credentials(*a.body, out, expires, why);
}

bool fetch_instance(const std::string& base, AwsCredentials* out, std::time_t* expires,
                    std::string* why) {
  // A redirect is said in `why` (no answer, or no role, leaves it empty: the chain has none):
  // the AWS SDK's chain, handed the same service, follows it to the other host with the
  // session token and signs with the keys that host gives, so it stops the load.
  const auto redirected = [why](const Answer& a, const std::string& url) {
    if (a.redirect) *why = url + " answered " + a.what;
    return a.redirect;
  };
  // IMDSv2: a session token first; a service that refuses the PUT (IMDSv1 only) is asked
  // without one, as the SDKs do; one that does not answer at all is not asked further.
  std::vector<std::string> headers;
  const std::string token_url = base + "/latest/api/token";
  const Answer token = ask(token_url, "PUT", {"X-aws-ec2-metadata-token-ttl-seconds: 21600"});
  if (!token.answered || redirected(token, token_url)) return false;
  if (token.body) headers.push_back("X-aws-ec2-metadata-token: " + *token.body);
  const std::string dir = base + "/latest/meta-data/iam/security-credentials/";
  const Answer roles = ask(dir, nullptr, headers);
  if (redirected(roles, dir) || !roles.body) return false;
  std::string role = roles.body->substr(0, roles.body->find('\n'));
  while (!role.empty() && std::isspace(static_cast<unsigned char>(role.back()))) role.pop_back();
  if (role.empty() || role.find('/') != std::string::npos) return false;
  const Answer text = ask(dir + role, nullptr, headers);
  if (redirected(text, dir + role)) return false;
  return text.body && parse_role_credentials(*text.body, out, expires);
}

bool is_true(std::string v) {
  for (char& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return v == "true" || v == "1";
}

// Whether the SDKs send a container's token to `url`: over https, or over http to this host
// or to the link-local addresses of ECS and EKS only. The host is the one a request goes
// to: after a user part's last '@' ("http://127.0.0.1@HOST/" connects to HOST), and a
// loopback address only as an address ("127.0.0.1.example.com" is a name of anywhere).
bool container_url_allowed(const std::string& url) {
  if (url.rfind("https://", 0) == 0) return true;
  if (url.rfind("http://", 0) != 0) return false;
  std::string host = url.substr(7, url.find_first_of("/?#", 7) - 7);
  if (const auto at = host.rfind('@'); at != std::string::npos) host = host.substr(at + 1);
  if (!host.empty() && host.front() == '[') {
    host = host.substr(0, host.find(']') + 1);
  } else {
    host = host.substr(0, host.find(':'));
  }
  // A host name is case-insensitive (RFC 3986 3.2.2): "LOCALHOST" is localhost, as the SDKs
  // (botocore compares the parsed, lower-cased host) ask it.
  for (char& c : host) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  in_addr v4{};
  const bool loopback_v4 = host.rfind("127.", 0) == 0 && inet_pton(AF_INET, host.c_str(), &v4) == 1;
  return host == "localhost" || loopback_v4 || host == "[::1]" || host == "169.254.170.2" ||
         host == "169.254.170.23" || host == "[fd00:ec2::23]";
}

// What the chain's last sources give; `final` where the answer is to be kept for the process
// (the instance's, or none: a container's refusal is asked again).
RoleLookup find_role_credentials(bool* final) {
  *final = true;
  RoleLookup out;
  std::shared_ptr<RoleCredentials> found;
  std::string named;     // the container's endpoint, as its refusal names it
  std::string instance;  // the instance metadata service, as its refusal names it
  if (const std::string rel = aws_env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"); !rel.empty()) {
    // A path on ECS's address: one that does not start with '/' would make of the address a
    // user part or a longer name ("@HOST/...", ".HOST/...") and send the token elsewhere.
    if (rel.front() != '/') {
      out.refused =
          "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI (environment) must be a path on ECS's "
          "address, starting with '/' (the container's token would go to another host); "
          "not asked";
      *final = false;
      return out;
    }
    named = "http://169.254.170.2" + rel + " (AWS_CONTAINER_CREDENTIALS_RELATIVE_URI)";
    found = std::make_shared<RoleCredentials>("http://169.254.170.2" + rel, fetch_container);
  } else if (const std::string full = aws_env("AWS_CONTAINER_CREDENTIALS_FULL_URI");
             !full.empty()) {
    // One the SDKs refuse is refused here too, not passed over for the instance's.
    if (!container_url_allowed(full)) {
      out.refused = "AWS_CONTAINER_CREDENTIALS_FULL_URI (environment) " + full +
                    " is refused: over plain http only a loopback address, localhost or ECS's and "
                    "EKS's addresses are asked (the container's token would go to another host)";
      *final = false;
      return out;
    }
    named = full + " (AWS_CONTAINER_CREDENTIALS_FULL_URI)";
    found = std::make_shared<RoleCredentials>(full, fetch_container);
  } else if (!is_true(aws_env("AWS_EC2_METADATA_DISABLED"))) {
    std::string base = aws_env("AWS_EC2_METADATA_SERVICE_ENDPOINT");
    if (base.empty()) base = "http://169.254.169.254";
    while (!base.empty() && base.back() == '/') base.pop_back();
    instance = base + (aws_env("AWS_EC2_METADATA_SERVICE_ENDPOINT").empty()
                           ? " (the default address)"
                           : " (AWS_EC2_METADATA_SERVICE_ENDPOINT)");
    found = std::make_shared<RoleCredentials>(base, fetch_instance);
  }
  std::string why;
  // A token that cannot be sent stops the load before the endpoint is asked, in the words of
  // the variable's refusal.
  if (std::string token; !named.empty() && !container_token(&token, &why)) {
    out.refused = why;
    *final = false;
    return out;
  }
  if (found && !found->fetch_now(&why)) {
    // No instance off EC2 is the usual case (the chain then has none); a container's
    // endpoint is named by the environment, so its failure is the load's, as is an instance's
    // redirect (the only failure of one that says why).
    if (named.empty() && why.empty()) return out;
    if (named.empty()) {
      out.refused = "the instance metadata service " + instance + " gave no credentials: " + why;
      *final = false;
      return out;
    }
    out.refused = "the container credentials endpoint " + named +
                  " gave no credentials: " + (why.empty() ? "no answer" : why);
    *final = false;
    return out;
  }
  out.found = std::move(found);
  return out;
}

}  // namespace

std::string run_credential_process(const std::string& command, double seconds,
                                   std::string* failed) {
  std::string text;
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) {
    *failed = std::string("it could not be started: ") + std::strerror(errno);
    return text;
  }
  // With a controlling terminal the process stays in this process group, as the SDKs run it:
  // a helper that asks for a second factor reads the terminal, which a background group may
  // not (SIGTTIN stops it), and the terminal's Ctrl-C reaches it as it reaches this process.
  // Without one nothing can prompt, and a group of its own lets one kill end what it started
  // too (a `sleep` under the shell would hold the pipe open). SIGINT and SIGPIPE as a fresh
  // process has them, not as a runtime set them.
  const bool terminal = [] {
    const int tty = ::open("/dev/tty", O_RDONLY | O_NOCTTY | O_CLOEXEC);
    if (tty < 0) return false;
    ::close(tty);
    return true;
  }();
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGINT);
  sigaddset(&defaults, SIGPIPE);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
  if (!terminal) {
    posix_spawnattr_setpgroup(&attr, 0);
    flags |= POSIX_SPAWN_SETPGROUP;
  }
  posix_spawnattr_setflags(&attr, flags);
  std::string sh = "sh", dash_c = "-c", cmd = command;
  char* argv[] = {sh.data(), dash_c.data(), cmd.data(), nullptr};
  // Not `environ`: a setenv on another thread (Python's os.environ) may move and free that
  // array while the child's copy is made (EFAULT, or a helper without its variables). The
  // helper gets the environment as the engine's threads read it (base/detail/environment.hpp).
  std::vector<std::string> entries = environment_entries();
  std::vector<char*> envp;
  envp.reserve(entries.size() + 1);
  for (std::string& e : entries) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = -1;
  const int spawned = ::posix_spawn(&pid, "/bin/sh", &actions, &attr, argv, envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(out[1]);
  if (spawned != 0) {
    ::close(out[0]);
    *failed = std::string("it could not be started: ") + std::strerror(spawned);
    return text;
  }
  // A process that never answers (a prompt nobody sees, a hung helper) must not hold the load
  // for ever, nor past a Ctrl-C: the wait is bounded and looks at the interrupt as requests do.
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(seconds));
  bool over = false;
  const char* ended = nullptr;
  for (;;) {
    if (interrupt_requested()) {
      ended = "interrupted";
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      ended = "timeout";
      break;
    }
    pollfd p{out[0], POLLIN, 0};
    const int ready = ::poll(&p, 1, 100);
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    char buf[4096];
    const ssize_t n = ::read(out[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // its end of the pipe closed: it exited
    if (text.size() + static_cast<std::size_t>(n) > kMaxAnswer) over = true;
    if (!over) text.append(buf, static_cast<std::size_t>(n));
  }
  ::close(out[0]);
  if (ended != nullptr) ::kill(terminal ? pid : -pid, SIGKILL);
  int status = 0;
  pid_t waited = -1;
  while ((waited = ::waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
  }
  if (ended != nullptr) {
    std::ostringstream why;
    if (std::string_view(ended) == "interrupted") {
      why << "it was ended by the interrupt";
    } else {
      why << "it gave no answer within " << seconds << " s, and was ended";
    }
    *failed = why.str();
  } else if (waited < 0) {
    *failed = std::string("its end was not seen: ") + std::strerror(errno);
  } else if (WIFEXITED(status) && WEXITSTATUS(status) != 0) {
    *failed = "it exited with status " + std::to_string(WEXITSTATUS(status));
  } else if (WIFSIGNALED(status)) {
    *failed = "it was ended by signal " + std::to_string(WTERMSIG(status));
  } else if (over) {
    *failed = "its output is longer than " + std::to_string(kMaxAnswer) + " bytes";
  }
  return text;
}

namespace {

bool fetch_process(const std::string& command, AwsCredentials* out, std::time_t* expires,
                   std::string* why) {
  std::string failed;
  const std::string text = run_credential_process(command, kProcessSeconds, &failed);
  if (!failed.empty()) {
    *why = failed;
    return false;
  }
  auto doc = parse_json_object("credential_process output", text);
  if (!doc) {
    *why = "its output is not a JSON object";
    return false;
  }
  const Json& j = *doc;
  const auto it = j.find("Version");
  if (it == j.end() || !it->is_number_integer() || it->get<long long>() != 1) {
    *why = "its output has no \"Version\": 1 (the one version the AWS CLI documents)";
    return false;
  }
  AwsCredentials c;
  std::string expiration;
  for (const auto& [key, field] :
       {std::pair{"AccessKeyId", &c.access_key}, std::pair{"SecretAccessKey", &c.secret_key},
        std::pair{"SessionToken", &c.session_token}, std::pair{"Expiration", &expiration}}) {
    const auto v = j.find(key);
    if (v == j.end() || v->is_null()) continue;
    if (!v->is_string()) {
      *why = std::string("its output's ") + key + " is not a string";
      return false;
    }
    *field = v->get<std::string>();
    if (const CredentialCharacter bad = bad_credential_character(*field); !bad.kind.empty()) {
      *why = std::string("its output's ") + key + " holds " + bad.kind + " (" + bad.code +
             "; it would go into request headers)";
      return false;
    }
  }
  if (c.access_key.empty() || c.secret_key.empty()) {
    *why = "its output lacks AccessKeyId or SecretAccessKey";
    return false;
  }
  std::time_t when = 0;
  if (!expiration.empty() && (when = parse_utc(expiration)) == 0) {
    *why = "its output's Expiration is not an ISO 8601 time";
    return false;
  }
  *out = std::move(c);
  *expires = when;
  return true;
}

}  // namespace

std::string aws_env(const char* name) {
  // Never getenv on an engine thread: see base/detail/environment.hpp.
  return environment_value(name).value_or(std::string());
}

std::string aws_file(const char* variable, const char* name) {
  std::string path = aws_env(variable);
  if (!path.empty()) return path;
  const std::string home = aws_env("HOME");
  return home.empty() ? std::string() : home + "/.aws/" + name;
}

bool parse_role_credentials(const std::string& text, AwsCredentials* out, std::time_t* expires,
                            std::string* why) {
  std::string ignored;
  if (why == nullptr) why = &ignored;
  *why =
      "its answer is no credentials document (AccessKeyId, SecretAccessKey, Token, "
      "Expiration)";
  auto doc = parse_json_object("credentials", text);
  if (!doc) return false;
  const Json& j = *doc;
  const auto str = [&](const char* key) -> std::string {
    const auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  if (j.contains("Code") && str("Code") != "Success") return false;
  AwsCredentials c{str("AccessKeyId"), str("SecretAccessKey"), str("Token")};
  if (c.access_key.empty() || c.secret_key.empty()) return false;
  // The values go into request headers: one with a CR or LF would add header lines to every
  // signed request. Such an answer is no credentials document, as one lacking a key is.
  for (const std::string* v : {&c.access_key, &c.secret_key, &c.session_token}) {
    if (const CredentialCharacter bad = bad_credential_character(*v); !bad.kind.empty()) {
      *why = "its answer's credentials hold " + bad.kind + " (" + bad.code +
             "; it would go into request headers)";
      return false;
    }
  }
  const std::string expiration = str("Expiration");
  std::time_t when = 0;
  if (!expiration.empty() && (when = parse_utc(expiration)) == 0) return false;
  *out = std::move(c);
  *expires = when;
  why->clear();
  return true;
}

bool RoleCredentials::fetch_now(std::string* why) {
  AwsCredentials c;
  std::time_t expires = 0;
  std::string ignored;
  if (!fetch_(where_, &c, &expires, why != nullptr ? why : &ignored)) return false;
  std::lock_guard lock(mu_);
  creds_ = std::move(c);
  expires_ = expires;
  return true;
}

AwsCredentials RoleCredentials::current() {
  std::unique_lock lock(mu_);
  const std::time_t now = std::time(nullptr);
  // One thread fetches while the others sign with the old credentials, still valid for up to
  // five minutes; a source that keeps answering with credentials about to expire, or none,
  // is asked at most every ten seconds.
  // A fetch begun by another process (this one forked while its parent fetched) is not this
  // process's to wait for: its thread is not here.
  const bool fetching = fetching_ && fetching_pid_ == ::getpid();
  if (expires_ == 0 || now + 300 < expires_ || fetching || now < last_try_ + 10) return creds_;
  fetching_ = true;
  fetching_pid_ = ::getpid();
  last_try_ = now;
  lock.unlock();
  AwsCredentials c;
  std::time_t expires = 0;
  std::string why;
  const bool ok = fetch_(where_, &c, &expires, &why);
  lock.lock();
  fetching_ = false;
  if (ok) {
    creds_ = std::move(c);
    expires_ = expires;
  }
  return creds_;
}

namespace {

// What role_credentials() found, per process: its lock is held across the source's request
// (a second caller waits for that answer rather than asking again), so a process forked while
// a thread of its parent asked copies the lock held by a thread it does not have. The child
// leaves the parent's state alone (leaked) and asks for its own.
struct FoundRole {
  pid_t pid = ::getpid();
  std::mutex mu;
  bool asked = false;
  std::shared_ptr<RoleCredentials> found;
  // A credential_process's, by its command: run once per process (and near its expiry).
  std::map<std::string, std::shared_ptr<RoleCredentials>> processes;
  // Its last failure, by its command, and when it ended: one load asks for credentials per
  // request (a directory's manifest, its LIST, each shard), and a helper that prompts (SSO,
  // a second factor) would prompt again for each. Given again for kProcessFailureSeconds.
  struct Failure {
    std::string why;
    std::chrono::steady_clock::time_point at;
  };
  std::map<std::string, Failure> process_failures;
};

// How long a failed credential_process is answered by its failure: longer than the requests of
// one load take after it (ms apart), short enough that a retry after logging in runs it anew.
constexpr double kProcessFailureSeconds = 10;

FoundRole& found_role() {
  static std::atomic<FoundRole*> state{nullptr};
  const pid_t self = ::getpid();
  FoundRole* now = state.load(std::memory_order_acquire);
  while (now == nullptr || now->pid != self) {
    auto* made = new FoundRole();
    if (state.compare_exchange_strong(now, made, std::memory_order_acq_rel)) return *made;
    delete made;  // another thread of this process made it first: `now` is that one
  }
  return *now;
}

}  // namespace

RoleLookup role_credentials() {
  FoundRole& role = found_role();
  std::lock_guard lock(role.mu);
  if (role.asked) return {role.found, {}};
  bool final = true;
  RoleLookup got = find_role_credentials(&final);
  if (final) {
    role.found = got.found;
    role.asked = true;
  }
  return got;
}

RoleLookup process_credentials(const std::string& command, const std::string& profile) {
  FoundRole& role = found_role();
  std::lock_guard lock(role.mu);
  if (const auto it = role.processes.find(command); it != role.processes.end()) {
    return {it->second, {}};
  }
  const auto refused = [&profile](const std::string& why) {
    return RoleLookup{nullptr, "the credential_process of profile '" + profile +
                                   "' in the shared config file (AWS_CONFIG_FILE or "
                                   "~/.aws/config) gave no credentials: " +
                                   why};
  };
  const auto now = std::chrono::steady_clock::now();
  if (const auto it = role.process_failures.find(command); it != role.process_failures.end()) {
    const double ago = std::chrono::duration<double>(now - it->second.at).count();
    if (ago < kProcessFailureSeconds) {
      std::ostringstream when;
      when << std::fixed << std::setprecision(1) << ago;
      return refused(it->second.why + " (when it was run " + when.str() +
                     " s ago; a failed run is run again only after " +
                     std::to_string(static_cast<int>(kProcessFailureSeconds)) + " s)");
    }
    role.process_failures.erase(it);
  }
  auto found = std::make_shared<RoleCredentials>(command, fetch_process);
  std::string why;
  if (!found->fetch_now(&why)) {
    // A Ctrl-C's end is no answer of the helper's: the next load runs it again.
    if (!interrupt_requested()) {
      role.process_failures[command] = {why, std::chrono::steady_clock::now()};
    }
    return refused(why);
  }
  role.processes.emplace(command, found);
  return {std::move(found), {}};
}

}  // namespace shardload::detail
