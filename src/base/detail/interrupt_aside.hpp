// A pending Ctrl-C set aside for work that must run through it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

namespace shardload::detail {

// A Ctrl-C ends every request made while it is pending. Work that must still run (a failed
// save's clean-up, which would otherwise leave all the save wrote; the look at whether an
// unanswered write landed) sets it aside for this object's life, on this thread, and it is
// asked for again at the end. With `most`, it is asked for again after that long too, while the
// work still runs: its requests then end as any other's, so a store gone quiet cannot hold a
// Ctrl-C for every attempt of every request (attempts x request_timeout each). Nested on one
// thread, the outer one alone holds the interrupt.
class InterruptSetAside {
 public:
  explicit InterruptSetAside(std::optional<std::chrono::milliseconds> most = std::nullopt);
  ~InterruptSetAside();
  InterruptSetAside(const InterruptSetAside&) = delete;
  InterruptSetAside& operator=(const InterruptSetAside&) = delete;

  // Whether a Ctrl-C was pending when this one began.
  [[nodiscard]] bool interrupted() const { return interrupted_; }
  // Whether a Ctrl-C is set aside on this thread now.
  [[nodiscard]] static bool active();

 private:
  bool interrupted_;
  bool outer_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread timer_;
};

}  // namespace shardload::detail
