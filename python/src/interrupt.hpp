// Ctrl-C during a call into the engine: the call runs with the GIL released, so Python's
// handler cannot run until it returns, and a request to a slow server used to hold it for as
// long as the server liked. `interruptible` wraps such a call in a shardload::InterruptibleWait:
// a SIGINT ends the call's remote requests (shardload/interrupt.hpp), and the call then raises
// the KeyboardInterrupt that Python's handler made instead of the failure the interrupt caused.
// Included by core_module.cc and legate_module.cc only, which share the check a save makes
// before it publishes (check_signals_before_commit).
#pragma once

#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "errors.hpp"
#include "gil.hpp"
#include "shardload/interrupt.hpp"
#include "shardload/status.hpp"

namespace shardload::python {

namespace py = pybind11;

// Whether SIGINT raises KeyboardInterrupt (Python's default handler): only then does it end
// the requests. A handler of the user's own runs after the call, as before; SIG_IGN and SIG_DFL
// keep their meaning.
inline bool sigint_raises_keyboard_interrupt() {
  const py::module_ signal = py::module_::import("signal");
  return signal.attr("getsignal")(signal.attr("SIGINT")).is(signal.attr("default_int_handler"));
}

// Where the wait was interrupted and Python's handler has an exception to raise (the main
// thread; other threads get the call's own error, ECANCELED): raises it.
inline void raise_if_interrupted(const InterruptibleWait& wait) {
  if (wait.interrupted() && PyErr_CheckSignals() != 0) throw py::error_already_set();
}

// Calls `f` with the GIL released, SIGINT ending its requests; called with the GIL held.
template <typename F>
auto interruptible(F&& f) -> decltype(f()) {
  InterruptibleWait wait(sigint_raises_keyboard_interrupt());
  try {
    if constexpr (std::is_void_v<decltype(f())>) {
      {
        GilReleased release;
        f();
      }
      raise_if_interrupted(wait);
    } else {
      auto r = [&] {
        GilReleased release;
        return f();
      }();
      raise_if_interrupted(wait);
      return r;
    }
  } catch (const py::error_already_set&) {
    throw;
  } catch (...) {
    raise_if_interrupted(wait);  // the KeyboardInterrupt instead of what the interrupt caused
    throw;
  }
}

// A save's look at Python before it publishes (SaveOptions::before_commit): a Ctrl-C that came
// while the save ran with the GIL released only marked its signal pending, and raises here, so
// an interrupted save publishes nothing; at the program's end (gil.hpp) nothing is published
// either. Called without the GIL.
inline void check_signals_before_commit() {
  if (interpreter_finalizing()) {
    throw std::runtime_error("save: the interpreter has ended; nothing was published");
  }
  GilAcquired gil;
  if (call_python(PyErr_CheckSignals) != 0) throw py::error_already_set();
}

// A Ctrl-C that comes during a save's publish step, after its last look
// (check_signals_before_commit) to its end (the staged files checked again, the manifest, the
// renames, an overwritten dataset's removal), does not stop it: the save completes, and the
// KeyboardInterrupt raised after it says so in a note (BaseException.add_note), for `dest`
// then holds the new dataset. Called with the GIL held.
inline void note_published(py::error_already_set& e, const std::string& dest) {
  if (!e.matches(PyExc_KeyboardInterrupt)) return;
  const py::object value = e.value();
  if (!py::hasattr(value, "add_note")) return;
  value.attr("add_note")(message_str(
      "the save completed before this interrupt was raised: " + printable_redacted(dest) +
      " holds the new dataset (with overwrite, the old one is gone)"));
}

// A Ctrl-C that came while the save's manifest PUT went unanswered, whose look could not tell
// whether the store took it (RemoteStore::settle_write's "whether it was stored cannot be
// told", as data: Status::stored_untold; after a Ctrl-C the look is short): `dest` may hold the
// new dataset, and a bare KeyboardInterrupt would say that nothing was published. The note says
// so, with the save's error (what it left, and why). Called with the GIL held.
inline void note_maybe_published(py::error_already_set& e, const std::string& dest,
                                 const Status& failed) {
  if (!e.matches(PyExc_KeyboardInterrupt) || failed.is_ok() || !failed.stored_untold()) return;
  const py::object value = e.value();
  if (!py::hasattr(value, "add_note")) return;
  value.attr("add_note")(message_str(
      "the save may have completed before this interrupt was raised: " + printable_redacted(dest) +
      " may hold the new dataset (the store may have taken its manifest; with overwrite, the "
      "old one may be gone): " +
      failed.message()));
}

// A Ctrl-C that failed a save whose clean-up did not leave the destination as it was (an object
// it could not delete, another writer's it left, its time under the Ctrl-C run out): the
// save's error says what is left, and a bare KeyboardInterrupt would say nothing. The note
// carries that error. (note_maybe_published's carries it already.) Called with the GIL held.
inline void note_clean_up_left(py::error_already_set& e, const Status& failed) {
  if (!e.matches(PyExc_KeyboardInterrupt) || failed.is_ok() || failed.stored_untold() ||
      failed.message().find("the clean-up ") == std::string::npos) {
    return;
  }
  const py::object value = e.value();
  if (!py::hasattr(value, "add_note")) return;
  value.attr("add_note")(message_str(
      "the save published nothing, and its clean-up left objects under the destination: " +
      failed.message()));
}

// A save that failed with `failed` while a Ctrl-C is pending (a front end whose requests the
// interrupt does not end: the Legate save): the KeyboardInterrupt is raised now, in place of the
// save's error, with note_maybe_published's note where the save may have published; returns
// where no signal is pending (the caller raises the save's error). Called with the GIL held.
inline void raise_pending_interrupt_of_failed_save(const std::string& dest, const Status& failed) {
  if (PyErr_CheckSignals() == 0) return;
  py::error_already_set e;
  note_maybe_published(e, dest, failed);
  note_clean_up_left(e, failed);
  throw e;
}

// After a save that published: a signal still pending raises now, with that note.
inline void raise_signals_after_publish(const std::string& dest) {
  if (PyErr_CheckSignals() == 0) return;
  py::error_already_set e;
  note_published(e, dest);
  throw e;
}

// `interruptible` for a save's call (`save` returns a Result or a Status): where the save
// published, the KeyboardInterrupt raised after it carries note_published's note.
template <typename F>
auto interruptible_save(const std::string& dest, F&& save) -> decltype(save()) {
  bool published = false;
  Status failed;
  auto r = [&] {
    try {
      return interruptible([&] {
        auto done = save();
        published = done.is_ok();
        if constexpr (std::is_same_v<std::decay_t<decltype(done)>, Status>) {
          if (!published) failed = done;
        } else {
          if (!published) failed = done.status();
        }
        return done;
      });
    } catch (py::error_already_set& e) {
      if (published) {
        note_published(e, dest);
      } else {
        note_maybe_published(e, dest, failed);
        note_clean_up_left(e, failed);
      }
      throw;
    }
  }();
  if (published) raise_signals_after_publish(dest);
  return r;
}

}  // namespace shardload::python
