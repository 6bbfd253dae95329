#include "testing/fake_apiserver/patch.h"

#include <algorithm>
#include <string>

#include "base/strings.h"

namespace prism::fakeapi {
namespace {

using Json = nlohmann::json;

std::string MergeKeyFor(std::string_view field) {
  if (field == "containers" || field == "initContainers" || field == "ephemeralContainers" ||
      field == "env" || field == "volumes" || field == "imagePullSecrets" ||
      field == "resourceClaims") {
    return "name";
  }
  if (field == "conditions" || field == "addresses") return "type";
  if (field == "ports") return "containerPort";
  if (field == "volumeMounts") return "mountPath";
  if (field == "ownerReferences") return "uid";
  if (field == "taints") return "key";
  return "";
}

bool IsPrimitiveSetList(std::string_view field) { return field == "finalizers"; }

bool IsDirective(const std::string& key) { return !key.empty() && key[0] == '$'; }

std::string PatchDirective(const Json& value) {
  if (!value.is_object()) return "";
  auto it = value.find("$patch");
  if (it == value.end() || !it->is_string()) return "";
  return it->get<std::string>();
}

// A copy of `value` with directive keys removed at every level.
Json StripDirectives(const Json& value) {
  if (value.is_object()) {
    Json out = Json::object();
    for (auto it = value.begin(); it != value.end(); ++it) {
      if (IsDirective(it.key())) continue;
      out[it.key()] = StripDirectives(it.value());
    }
    return out;
  }
  if (value.is_array()) {
    Json out = Json::array();
    for (const Json& item : value) {
      if (PatchDirective(item) == "delete") continue;
      out.push_back(StripDirectives(item));
    }
    return out;
  }
  return value;
}

void MergeMap(Json& target, const Json& patch);

void MergeListByKey(Json& target, const Json& patch, const std::string& key) {
  for (const Json& element : patch) {
    if (PatchDirective(element) == "replace") {
      target = StripDirectives(patch);
      return;
    }
  }
  for (const Json& element : patch) {
    if (!element.is_object() || !element.contains(key)) {
      target.push_back(StripDirectives(element));
      continue;
    }
    auto existing = std::find_if(target.begin(), target.end(), [&](const Json& item) {
      return item.is_object() && item.contains(key) && item[key] == element[key];
    });
    if (PatchDirective(element) == "delete") {
      if (existing != target.end()) target.erase(existing);
    } else if (existing != target.end()) {
      MergeMap(*existing, element);
    } else {
      target.push_back(StripDirectives(element));
    }
  }
}

void MergeMap(Json& target, const Json& patch) {
  if (!target.is_object()) target = Json::object();
  if (PatchDirective(patch) == "replace") {
    target = StripDirectives(patch);
    return;
  }
  for (auto it = patch.begin(); it != patch.end(); ++it) {
    const std::string& key = it.key();
    const Json& value = it.value();
    static constexpr std::string_view kDeleteFromList = "$deleteFromPrimitiveList/";
    if (key.rfind(kDeleteFromList, 0) == 0) {
      std::string field = key.substr(kDeleteFromList.size());
      auto list = target.find(field);
      if (list != target.end() && list->is_array() && value.is_array()) {
        Json kept = Json::array();
        for (const Json& item : *list) {
          if (std::find(value.begin(), value.end(), item) == value.end()) kept.push_back(item);
        }
        *list = kept;
      }
      continue;
    }
    if (IsDirective(key)) continue;  // $patch, $setElementOrder/..., $retainKeys.
    if (value.is_null()) {
      target.erase(key);
    } else if (value.is_object()) {
      if (PatchDirective(value) == "delete") {
        target.erase(key);
      } else {
        MergeMap(target[key], value);
      }
    } else if (value.is_array()) {
      std::string merge_key = MergeKeyFor(key);
      auto current = target.find(key);
      bool have_list = current != target.end() && current->is_array();
      if (!merge_key.empty() && have_list) {
        MergeListByKey(*current, value, merge_key);
      } else if (IsPrimitiveSetList(key) && have_list) {
        for (const Json& item : value) {
          if (std::find(current->begin(), current->end(), item) == current->end()) {
            current->push_back(item);
          }
        }
      } else {
        target[key] = StripDirectives(value);
      }
    } else {
      target[key] = value;
    }
  }
}

}  // namespace

Json StrategicMergePatch(const Json& original, const Json& patch) {
  Json result = original;
  MergeMap(result, patch);
  return result;
}

absl::StatusOr<Json> ApplyPatch(const Json& original, std::string_view patch_body, PatchKind kind) {
  Json patch = Json::parse(patch_body, nullptr, /*allow_exceptions=*/false);
  if (patch.is_discarded()) {
    return absl::InvalidArgumentError("the body of the request was in an unknown format");
  }
  switch (kind) {
    case PatchKind::kMerge: {
      if (!patch.is_object()) {
        return absl::InvalidArgumentError("a merge patch must be a JSON object");
      }
      Json result = original;
      result.merge_patch(patch);
      return result;
    }
    case PatchKind::kStrategicMerge:
      if (!patch.is_object()) {
        return absl::InvalidArgumentError("a strategic merge patch must be a JSON object");
      }
      return StrategicMergePatch(original, patch);
    case PatchKind::kJson:
      if (!patch.is_array()) {
        return absl::InvalidArgumentError("a JSON patch must be a JSON array of operations");
      }
      try {
        return original.patch(patch);
      } catch (const Json::exception& e) {
        return absl::FailedPreconditionError(StrCat("the JSON patch cannot apply: ", e.what()));
      }
  }
  return absl::InvalidArgumentError("unknown patch type");
}

}  // namespace prism::fakeapi
