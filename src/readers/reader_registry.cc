#include "shardload/reader_registry.hpp"

#include <algorithm>
#include <deque>
#include <mutex>
#include <utility>

#include "readers/detail/readers.hpp"
#include "shardload/formats.hpp"

namespace shardload {

namespace {

struct Registry {
  std::mutex mutex;
  std::vector<ReaderRegistration> entries;
  // One per entry, in the same order; a deque, so that a descriptor never moves.
  std::deque<FormatDescriptor> descriptors;
};

Registry& registry() {
  // Never destroyed: a task may make a reader while the process exits.
  static auto* r = new Registry;
  return *r;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool valid_name(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.';
  });
}

bool valid_extension(std::string_view ext) {
  return ext.size() >= 2 && ext.size() <= 32 && ext[0] == '.' && valid_name(ext.substr(1));
}

}  // namespace

Status register_reader(ReaderRegistration reg) {
  if (!valid_name(reg.name)) {
    return {ErrorCode::kInvalidArgument,
            "register_reader: name '" + reg.name +
                "': expected 1 to 64 letters, digits, '_', '-' or '.'"};
  }
  if (!reg.factory) {
    return {ErrorCode::kInvalidArgument, "register_reader: '" + reg.name + "': no factory"};
  }
  for (const auto& ext : reg.extensions) {
    if (!valid_extension(ext)) {
      return {ErrorCode::kInvalidArgument,
              "register_reader: '" + reg.name + "': extension '" + ext +
                  "': expected a dot and 1 to 31 letters, digits, '_', '-' or '.'"};
    }
    if (format_from_extension("x" + ext) != Format::kAuto) {
      return {ErrorCode::kInvalidArgument,
              "register_reader: '" + reg.name + "': extension '" + ext + "' is the built-in " +
                  format_name(format_from_extension("x" + ext)) + " format's"};
    }
  }
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  for (const auto& e : r.entries) {
    if (e.name == reg.name) {
      return {ErrorCode::kInvalidArgument,
              "register_reader: a reader named '" + reg.name + "' is already registered"};
    }
    for (const auto& ext : reg.extensions) {
      if (std::find(e.extensions.begin(), e.extensions.end(), ext) != e.extensions.end()) {
        return {ErrorCode::kInvalidArgument, "register_reader: '" + reg.name + "': extension '" +
                                                 ext + "' is taken by the reader '" + e.name + "'"};
      }
    }
  }
  FormatDescriptor d;
  d.format = Format::kCustom;
  d.name = reg.name;
  d.extensions = reg.extensions;
  d.capabilities = reg.capabilities;
  d.make_reader = reg.factory;
  d.registered = true;
  r.descriptors.push_back(std::move(d));
  r.entries.push_back(std::move(reg));
  return Status::ok();
}

FormatOptions custom_format(std::string name) {
  FormatOptions o;
  o.format = Format::kCustom;
  o.reader = std::move(name);
  return o;
}

Status set_format_option(std::string_view name, FormatOptions* options) {
  Result<Format> builtin = parse_format(name);
  if (builtin) {
    options->format = *builtin;
    options->reader.clear();
    return Status::ok();
  }
  const std::vector<std::string> names = registered_readers();
  if (std::find(names.begin(), names.end(), name) == names.end()) return builtin.status();
  options->format = Format::kCustom;
  options->reader = std::string(name);
  return Status::ok();
}

std::vector<std::string> registered_readers() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  std::vector<std::string> names;
  for (const auto& e : r.entries) names.push_back(e.name);
  return names;
}

std::optional<std::string> registered_reader_for_path(std::string_view path) {
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  for (const auto& e : r.entries) {
    for (const auto& ext : e.extensions) {
      if (ends_with(path, ext)) return e.name;
    }
  }
  return std::nullopt;
}

Result<std::string> registered_default_pattern(const std::string& name) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  for (const auto& e : r.entries) {
    if (e.name != name) continue;
    if (e.extensions.empty()) {
      return Status(ErrorCode::kInvalidArgument,
                    "the reader '" + name +
                        "' was registered without extensions: name the files with a pattern");
    }
    return "shard_{:04d}" + e.extensions.front();
  }
  return Status(ErrorCode::kInvalidArgument, "no reader is registered as '" + name + "'");
}

const FormatDescriptor* find_registered_format(std::string_view name) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  for (const auto& d : r.descriptors) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

const FormatDescriptor* registered_format_for_path(std::string_view path) {
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  for (const auto& d : r.descriptors) {
    for (const auto& ext : d.extensions) {
      if (ends_with(path, ext)) return &d;
    }
  }
  return nullptr;
}

const FormatDescriptor* find_format(Format format, std::string_view reader) {
  return format == Format::kCustom ? find_registered_format(reader) : find_format(format);
}

namespace detail {

Result<std::unique_ptr<ShardReader>> make_registered_reader(const FormatOptions& options,
                                                            const ReaderContext& context) {
  ReaderFactory factory;
  {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    for (const auto& e : r.entries) {
      if (e.name == options.reader) factory = e.factory;
    }
  }
  if (!factory) {
    return Status(ErrorCode::kInvalidArgument,
                  "no reader is registered as '" + options.reader +
                      "' in this process; register it (register_reader) on every rank before "
                      "discover or load");
  }
  auto made = factory(options, context);
  if (made && *made == nullptr) {
    return Status(ErrorCode::kInvalidArgument,
                  "the factory of the reader '" + options.reader + "' returned no reader");
  }
  return made;
}

}  // namespace detail

}  // namespace shardload
