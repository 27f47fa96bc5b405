// Readers for formats shardload does not know, registered under a name.
//
// A registered reader is a factory making a ShardReader (probe + read_rows, the contract of
// shardload/reader.hpp); a dataset names it with FormatOptions{.format = Format::kCustom,
// .reader = NAME}, or by one of the extensions it was registered with. The name travels
// with the layout (the codec), and the task side makes its reader from the registry of its
// own process by that name: register the reader on every rank (the same code runs on every
// rank under control replication; call register_reader at start-up, before discover or
// load). A name the task side does not know fails the load with kInvalidArgument naming it.
//
// make_reader wraps registered readers as it wraps the built-in ones: an exception thrown by
// the factory, probe or read_rows becomes a Status naming the file. Discovery checks what
// probe reports as for any format (rows >= 0, dtype and trailing shape agreeing across
// shards) and, before probe sees a path, that it is a regular file.
//
// Contract: register_reader and the lookups are thread-safe; a registration lasts for the
// process (a name cannot be replaced or removed: tasks in flight may be using it). The
// factory is called from any thread, once per reader object (one per tile being read).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shardload/format.hpp"
#include "shardload/formats.hpp"
#include "shardload/reader.hpp"
#include "shardload/status.hpp"

namespace shardload {

using ReaderFactory = std::function<Result<std::unique_ptr<ShardReader>>(
    const FormatOptions& options, const ReaderContext& context)>;

struct ReaderRegistration {
  // Letters, digits, '_', '-' and '.'; at most 64 characters.
  std::string name;
  ReaderFactory factory;
  // Extensions (".shd") whose files discover() gives this reader when no format is named;
  // none of the built-in formats' and none registered by another reader.
  std::vector<std::string> extensions;
  // What the engine may do with the reader's shards (shardload/formats.hpp); the defaults
  // promise nothing.
  FormatCapabilities capabilities;
};

// kInvalidArgument naming what is wrong: a bad or taken name, no factory, an extension
// that is not ".xyz" or is taken.
Status register_reader(ReaderRegistration registration);

// FormatOptions selecting the reader registered as `name` (it need not be registered yet).
FormatOptions custom_format(std::string name);

// Sets options->format (and options->reader) from a format as the bindings spell it: "auto", a
// built-in format's name or alias (parse_format), or the name of a reader registered in this
// process, which selects it as custom_format does. The error of parse_format otherwise; options
// unchanged then.
Status set_format_option(std::string_view name, FormatOptions* options);

// The names registered in this process, in registration order.
std::vector<std::string> registered_readers();

// The reader registered for the path's extension, if any.
std::optional<std::string> registered_reader_for_path(std::string_view path);

// "shard_{:04d}" + the reader's first extension: the numbering a directory source of its
// files has by default. kInvalidArgument for an unknown name or one without extensions.
Result<std::string> registered_default_pattern(const std::string& name);

}  // namespace shardload
