// testing/fake_apiserver/patch.h: the three PATCH flavours of the Kubernetes API.
//
// - JSON merge patch (RFC 7386): maps merge, null deletes, lists are replaced.
// - Strategic merge patch, for the simple cases: as merge patch, except that lists with a known
//   merge key (containers/env/volumes by name, conditions/addresses by type, ports by
//   containerPort, volumeMounts by mountPath, ownerReferences by uid, taints by key) merge element
//   by element, `finalizers` merges as a set, and the directives `$patch: delete|replace` and
//   `$deleteFromPrimitiveList/<field>` are honoured (`$setElementOrder` and `$retainKeys` are
//   accepted and ignored).
// - JSON patch (RFC 6902), including `test`.
// Pure; thread-compatible.
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace prism::fakeapi {

enum class PatchKind { kMerge, kStrategicMerge, kJson };

// Returns the patched copy of `original`. InvalidArgument if `patch_body` is not JSON of the right
// shape (the API server's 400); FailedPrecondition if a JSON patch operation cannot apply (a failed
// `test`, a missing path: the API server's 422).
absl::StatusOr<nlohmann::json> ApplyPatch(const nlohmann::json& original,
                                          std::string_view patch_body, PatchKind kind);

nlohmann::json StrategicMergePatch(const nlohmann::json& original, const nlohmann::json& patch);

}  // namespace prism::fakeapi
