// testing/fake_apiserver/resources.h: the API resources the fake API server serves, with the
// field selectors the real one supports for each (tests only).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace prism::fakeapi {

// One API resource the fake serves.
struct ResourceInfo {
  std::string prefix;       // "/api/v1" or "/apis/<group>/<version>".
  std::string api_version;  // "v1" or "<group>/<version>".
  std::string plural;
  std::string kind;
  bool namespaced;
  bool has_status;
  // Field selector labels the real API server supports for this kind.
  std::vector<std::string> fields;
  // The name accepted by the direct-access methods.
  std::string short_name;
};

// Every resource served, in a fixed order.
const std::vector<ResourceInfo>& Resources();
// By URL prefix and plural; null when not served.
const ResourceInfo* FindResource(std::string_view prefix, std::string_view plural);
// By the short name the direct-access methods take ("pods", "events.events.k8s.io"); or null.
const ResourceInfo* FindResourceByName(std::string_view name);

}  // namespace prism::fakeapi
