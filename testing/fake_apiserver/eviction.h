// testing/fake_apiserver/eviction.h: POST pods/{name}/eviction (policy/v1 Eviction), as the API
// server's EvictionREST.Create (pkg/registry/core/pod/storage/eviction.go) treats the parts Prism
// uses: the body must be an Eviction naming the pod; deleteOptions.preconditions.uid must match
// (409 otherwise); deleteOptions.dryRun ["All"] (or ?dryRun=All) checks without deleting; a
// real eviction deletes the pod (at once: no graceful termination here). PodDisruptionBudgets are
// not modelled: a test makes the API server refuse as a PDB does with a fault (429 on the
// eviction path, FakeApiServer::InjectFault), which refuses dry runs alike.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace prism::fakeapi {

struct EvictionRequest {
  bool dry_run = false;
  std::string uid;  // Precondition; "" for none.
};

// The Eviction for pod `name` in `body`; `query` is the request's query string. InvalidArgument
// for a body that is not one.
absl::StatusOr<EvictionRequest> ParseEviction(const nlohmann::json& body, std::string_view name,
                                              std::string_view query);
// Aborted (409) when the precondition does not hold for `pod`.
absl::Status CheckEviction(const EvictionRequest& eviction, const nlohmann::json& pod);

}  // namespace prism::fakeapi
