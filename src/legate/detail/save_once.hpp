// The once-per-job steps of a save (src/legate/save_once.cc): each runs in a one-point task
// and every rank gets its outcome, so that a save called on every rank of a job begins one
// SaveJob (one staging directory, or one listing of the prefix), whose units every rank's tiles
// write, and publishes it once.
#pragma once

#include <string>
#include <vector>

#include "engine/detail/save_job.hpp"
#include "shardload/save.hpp"
#include "shardload/status.hpp"

namespace shardload::detail {

// SaveJob::begin in one point; every rank gets the same job or the same Status.
Result<SaveJob> begin_save_once(const std::string& dest, const SaveOptions& options, SaveSpec spec);

// job.publish(&own) in one point (the metadata, the manifest, the store's publish); the same
// Status on every rank. *published: whether the new dataset is at dest, also on an error.
// options.before_commit is not called: every rank calls it before this.
Status publish_save_once(const SaveJob& job, const std::vector<WrittenKey>& own, bool* published);

}  // namespace shardload::detail
