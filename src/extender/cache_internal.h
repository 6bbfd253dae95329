// src/extender/cache_internal.h: helpers shared by the SchedulerCache's source files
// (cache.cc: informer feed, charging, verbs; cache_maintenance.cc; cache_observability.cc).
#pragma once

#include <set>
#include <string>
#include <tuple>

#include "core/sched/cluster.h"

namespace prism::extender::cache_internal {

// SchedulerCache::State as the snapshot and `prism status` name it.
const char* StateName(int state);

// Instances a tracked decision names are held by Prism pods, whatever the node reports: they
// are marked free in `spec` so that the pods' decisions can take them again.
void ReleaseClaimedInstances(const std::set<std::tuple<std::string, std::string, int>>& claimed,
                             sched::NodeSpec& spec);

}  // namespace prism::extender::cache_internal
