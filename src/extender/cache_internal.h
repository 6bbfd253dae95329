// src/extender/cache_internal.h: helpers shared by the SchedulerCache's source files
// (cache.cc: informer feed, charging, verbs; cache_maintenance.cc; cache_observability.cc;
// cache_dra.cc).
#pragma once

#include <map>
#include <set>
#include <string>
#include <tuple>

#include "absl/status/statusor.h"

#include "core/sched/cluster.h"

namespace prism::extender::cache_internal {

// SchedulerCache::State as the snapshot and `prism status` name it.
const char* StateName(int state);

// MIG instances (uuid, profile, start) a prism.io/decision names; empty if there is none (a
// HAMi-only decision names none). InvalidArgument naming the field for a malformed decision.
absl::StatusOr<std::set<std::tuple<std::string, std::string, int>>> ClaimedInstances(
    const std::map<std::string, std::string>& annotations);

// Instances a tracked decision names are held by Prism pods, whatever the node reports: they
// are marked free in `spec` so that the pods' decisions can take them again.
void ReleaseClaimedInstances(const std::set<std::tuple<std::string, std::string, int>>& claimed,
                             sched::NodeSpec& spec);

}  // namespace prism::extender::cache_internal
