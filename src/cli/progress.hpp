// The progress bar of the commands that run long (read, index --checksum, verify, write): one
// line on stderr, redrawn in place, drawn only where stderr is a terminal. Piped or redirected
// nothing is written, so scripts and tests see the output they always saw; the bar is cleared
// when the work ends, so the terminal keeps only the report.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

namespace shardload::cli {

// Whether a bar is drawn: stderr is a terminal (isatty) and this process prints (on several
// ranks only the first does; see silence_progress).
bool stderr_is_terminal();
// No bar from now on in this process: a rank that does not print.
void silence_progress();

// The bar shows the command's name, the fraction done, the bytes done of all, a count (rows,
// shards) where the caller has one, the rate and the seconds so far. It never shows a file
// name, so nothing a name holds (a secret in a URL's query, a control character) can reach
// the terminal through it. update() may be called from any thread.
class TerminalBar {
 public:
  // `label`: the command ("read"); `unit`: what the count counts ("rows"), none when
  // `total_count` is 0. `on`: whether to draw at all.
  TerminalBar(const char* label, std::uint64_t total_bytes, std::int64_t total_count = 0,
              const char* unit = "", bool on = stderr_is_terminal());
  ~TerminalBar();
  TerminalBar(const TerminalBar&) = delete;
  TerminalBar& operator=(const TerminalBar&) = delete;

  bool on() const { return on_; }
  std::uint64_t total_bytes() const { return total_bytes_; }
  // Restarts the clock of the rate and the seconds.
  void start();
  // Redraws with the work done so far (count_done < 0: the count is left as it was), at most
  // ten times a second; the first call that reaches the total always draws.
  void update(std::uint64_t bytes_done, std::int64_t count_done = -1);
  // Draws the bar full (the work is done), then clears it.
  void finish();
  // Clears the line (after an error: the message then starts at the line's start).
  void clear();

 private:
  void draw(std::chrono::steady_clock::time_point now);

  std::mutex mutex_;
  const char* label_;
  const char* unit_;
  std::uint64_t total_bytes_;
  std::int64_t total_count_;
  std::uint64_t bytes_done_ = 0;
  std::int64_t count_done_ = 0;
  bool on_;
  bool drawn_ = false;
  std::size_t drawn_width_ = 0;  // the longest line drawn, which clear() blanks
  std::chrono::steady_clock::time_point start_, last_;
};

// This process's bytes read (or written) by its system calls so far (Linux's /proc/self/io
// rchar, wchar); -1 where the counter cannot be read.
std::int64_t process_io_bytes(bool written);

// Feeds a TerminalBar from this process's I/O counters, polled on a thread of its own, for
// work that runs where no callback reaches (Legate's tasks report nothing as they complete):
// the bytes this process read or wrote since the ticker started, held below the total until
// the caller finishes the bar. On several ranks only the first draws, and it counts its own
// reads, a share of the total. Without a bar that is on, no thread starts.
class IoTicker {
 public:
  IoTicker(TerminalBar* bar, bool written);
  ~IoTicker();
  IoTicker(const IoTicker&) = delete;
  IoTicker& operator=(const IoTicker&) = delete;
  // Stops the thread (the destructor does too); the caller then finishes or clears the bar.
  void stop();

 private:
  TerminalBar* bar_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace shardload::cli
