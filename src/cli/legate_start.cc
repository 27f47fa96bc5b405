#include "cli/legate_start.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <legate.h>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <string_view>
#include <thread>

namespace shardload::cli {

std::string start_failure(const std::string& command, const std::string& first) {
  const char* config = std::getenv("LEGATE_CONFIG");
  return "shardload " + command + ": Legate could not start: " + first + "\nshardload " + command +
         ": it was given " +
         (config != nullptr && *config != '\0' ? "LEGATE_CONFIG='" + std::string(config) + "'"
                                               : std::string("no LEGATE_CONFIG (automatic "
                                                             "configuration)")) +
         "; set LEGATE_CONFIG to what this machine has, e.g. LEGATE_CONFIG='--cpus 2 --utility 1 "
         "--gpus 0 --sysmem 4000' for its CPUs only (docs/install.md, \"Running without a "
         "GPU\")\n";
}

namespace {

constexpr std::string_view kReport = "== LEGATE ERROR:";

// What the start wrote to stderr, read from a pipe by a thread of its own: whole lines go on
// at once (so a start that crashes still shows them) until Legate's error report begins, which
// is held until the start returns or the process exits.
struct Hold {
  std::mutex mutex;
  std::condition_variable done_cv;
  std::string text;  // read and not passed on
  bool holding = false;
  bool done = false;  // the reader saw the end of the pipe
  bool active = false;
  int stderr_fd = -1;  // the real stderr
  std::string command;
};

Hold& hold() {
  static auto* h = new Hold;  // never destroyed: the exit handler may run after static dtors
  return *h;
}

void write_all(int fd, std::string_view s) {
  while (!s.empty()) {
    const ssize_t n = ::write(fd, s.data(), s.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    s.remove_prefix(static_cast<std::size_t>(n));
  }
}

// Passes on the whole lines before a report; under the lock.
void pass_lines(Hold& h) {
  for (std::size_t nl; !h.holding && (nl = h.text.find('\n')) != std::string::npos;) {
    const std::string_view line(h.text.data(), nl + 1);
    if (line.starts_with(kReport)) {
      h.holding = true;
      break;
    }
    write_all(h.stderr_fd, line);
    h.text.erase(0, nl + 1);
  }
}

void read_pipe(int in) {
  Hold& h = hold();
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(in, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    std::lock_guard lock(h.mutex);
    h.text.append(buf, static_cast<std::size_t>(n));
    if (h.active) {
      pass_lines(h);
    } else {
      // After the start: a copy of the pipe's write end that Legate kept still reaches stderr.
      write_all(h.stderr_fd, h.text);
      h.text.clear();
    }
  }
  ::close(in);
  std::lock_guard lock(h.mutex);
  h.done = true;
  h.done_cv.notify_all();
}

// stderr again, and everything the reader could read; returns what was held.
std::string end_hold() {
  Hold& h = hold();
  std::cerr.flush();
  std::fflush(stderr);
  const int real = ::dup(h.stderr_fd);
  ::dup2(real, STDERR_FILENO);  // closes the pipe's write end: the reader sees its end
  ::close(real);
  std::unique_lock lock(h.mutex);
  // A write end Legate duplicated would keep the pipe open: wait a moment, no longer.
  h.done_cv.wait_for(lock, std::chrono::seconds(2), [&] { return h.done; });
  h.active = false;
  std::string held = std::move(h.text);
  h.text.clear();
  return held;
}

// Legate's first line in a held report: "Unknown argument: --cpuz".
std::string first_report_line(const std::string& held) {
  std::size_t at = 0;
  while ((at = held.find(kReport, at)) != std::string::npos) {
    at += kReport.size();
    const std::size_t end = held.find('\n', at);
    std::string line = held.substr(at, end == std::string::npos ? end : end - at);
    line.erase(0, line.find_first_not_of(' '));
    if (!line.empty()) return line;
  }
  return {};
}

void on_exit() {
  Hold& h = hold();
  if (!h.active) return;
  const std::string held = end_hold();
  const std::string first = first_report_line(held);
  if (held.find("Usage: LEGATE_CONFIG") != std::string::npos && !first.empty()) {
    write_all(STDERR_FILENO, start_failure(h.command, first));
  } else {
    write_all(STDERR_FILENO, held);
  }
}

}  // namespace

void start_legate(const std::string& command) {
  Hold& h = hold();
  int fds[2];
  if (h.stderr_fd >= 0 || ::pipe2(fds, O_CLOEXEC) != 0) {
    legate::start();  // a second start, or no pipe to be had: as Legate prints it
    return;
  }
  std::cerr.flush();
  std::fflush(stderr);
  h.stderr_fd = ::fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
  if (h.stderr_fd < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    legate::start();
    return;
  }
  h.command = command;
  h.active = true;
  std::thread(read_pipe, fds[0]).detach();
  ::dup2(fds[1], STDERR_FILENO);
  ::close(fds[1]);
  static const bool registered = (std::atexit(on_exit), true);
  (void)registered;
  try {
    legate::start();
  } catch (...) {
    write_all(STDERR_FILENO, end_hold());
    throw;
  }
  write_all(STDERR_FILENO, end_hold());
}

}  // namespace shardload::cli
