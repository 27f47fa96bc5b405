// Whether a query key names a secret, for a message that shows a key and its value apart from
// any URL (a `--storage-option KEY=VALUE` the command line refuses). Internal: everything
// else shows URLs through redact_secrets (shardload/status.hpp), which uses the same list.
#pragma once

#include <string_view>

namespace shardload::detail {

// `key` (as given: percent-encoded or not, any case) is one of the secret query keys whose
// values redact_secrets hides (the list and why: status.cc).
bool is_secret_query_key(std::string_view key);

}  // namespace shardload::detail
