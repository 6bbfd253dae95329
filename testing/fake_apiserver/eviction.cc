#include "testing/fake_apiserver/eviction.h"

#include "base/strings.h"

namespace prism::fakeapi {

absl::StatusOr<EvictionRequest> ParseEviction(const nlohmann::json& body, std::string_view name,
                                              std::string_view query) {
  if (!body.is_object()) return absl::InvalidArgumentError("the body must be a JSON object");
  const std::string kind = body.value("kind", "");
  if (kind != "Eviction") return absl::InvalidArgumentError(StrCat("expected an Eviction, got ", kind));
  const nlohmann::json metadata = body.value("metadata", nlohmann::json::object());
  const std::string body_name = metadata.is_object() ? metadata.value("name", "") : "";
  if (body_name != name) {
    return absl::InvalidArgumentError(
        StrCat("name in URL does not match name in Eviction object (", body_name, ")"));
  }
  EvictionRequest out;
  out.dry_run = query.find("dryRun=All") != std::string_view::npos;
  const nlohmann::json options = body.value("deleteOptions", nlohmann::json::object());
  if (!options.is_object()) return absl::InvalidArgumentError("deleteOptions must be an object");
  if (auto dry = options.find("dryRun"); dry != options.end()) {
    if (!dry->is_array()) return absl::InvalidArgumentError("deleteOptions.dryRun must be a list");
    for (const nlohmann::json& v : *dry) {
      if (v != "All") return absl::InvalidArgumentError("deleteOptions.dryRun: only All is valid");
      out.dry_run = true;
    }
  }
  if (auto pre = options.find("preconditions"); pre != options.end() && pre->is_object()) {
    out.uid = pre->value("uid", "");
  }
  return out;
}

absl::Status CheckEviction(const EvictionRequest& eviction, const nlohmann::json& pod) {
  const std::string uid = pod.value("metadata", nlohmann::json::object()).value("uid", "");
  if (!eviction.uid.empty() && eviction.uid != uid) {
    return absl::AbortedError(StrCat("Precondition failed: UID in precondition: ", eviction.uid,
                                     ", UID in object meta: ", uid));
  }
  return absl::OkStatus();
}

}  // namespace prism::fakeapi
