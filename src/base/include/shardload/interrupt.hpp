// Ctrl-C for the waits on remote storage. A request to object storage can wait for a long time
// (a slow server, its retries); a front end that takes SIGINT (the Python binding, the CLI)
// asks for an interrupt here, and every request in flight or about to start ends with
// ECANCELED instead: a discovery or a load then fails promptly, and the front end reports the
// interrupt (KeyboardInterrupt, exit status 130) rather than that failure.
#pragma once

namespace shardload {

// Asks every remote request in flight, and every one started until the interrupt is cleared,
// to end with ECANCELED. Async-signal-safe.
void request_interrupt() noexcept;
// Whether an interrupt was asked for and not yet cleared.
bool interrupt_requested() noexcept;
// Forgets the interrupt (the CLI never needs to: it exits).
void clear_interrupt() noexcept;

// For a program of its own (the CLI): SIGINT asks for an interrupt, and a second SIGINT ends the
// process as SIGINT does by default. Where `message` is given, a process still running
// `grace_seconds` after the first SIGINT (work that makes no request, which the interrupt does
// not end) writes it to stderr and ends with status 130; `message` must outlive the process.
// Replaces the handler installed: call it again (with no message, which keeps the first one's)
// after a runtime that installs its own has started.
void interrupt_on_sigint(const char* message = nullptr, unsigned grace_seconds = 0);

// The program has written its own line about the interrupt: a grace that runs out while it
// finishes (a request it cannot end held by a library's clean-up) ends the process with status
// 130 without writing interrupt_on_sigint's message a second time.
void interrupt_message_written() noexcept;

// A wait of a front end that SIGINT may end (the Python binding makes one around each call
// into the engine that can make requests). While at least one with `sigint` is alive, a SIGINT
// asks for an interrupt and then goes on to the handler that was installed before (Python's,
// which makes the KeyboardInterrupt): the handler is chained in front of the current one when
// the wait begins, unless it is already there. The interrupt is cleared when the last wait
// alive ends, so that calls made after it are not refused. Waits may overlap on any threads.
class InterruptibleWait {
 public:
  explicit InterruptibleWait(bool sigint);
  ~InterruptibleWait();
  InterruptibleWait(const InterruptibleWait&) = delete;
  InterruptibleWait& operator=(const InterruptibleWait&) = delete;
  // Whether an interrupt was asked for while this wait is alive (ask before it ends).
  bool interrupted() const noexcept { return interrupt_requested(); }

 private:
  bool sigint_;
};

}  // namespace shardload
