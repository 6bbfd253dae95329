// src/config/names.h: Kubernetes names that reach Prism where the API server did not check them
// (pod annotations anyone who may edit the pod can write, the node agent's files on the host),
// held to the API server's own rules before anything uses them.
//
// The API server's rules (kubernetes/kubernetes, pkg/apis/core/validation/validation.go):
//   container name  DNS-1123 label      validateContainerCommon -> ValidateDNS1123Label
//   namespace       DNS-1123 label      ValidateNamespaceName (NameIsDNSLabel)
//   pod name        DNS-1123 subdomain  ValidatePodName (NameIsDNSSubdomain)
//   node name       DNS-1123 subdomain  ValidateNodeName (NameIsDNSSubdomain)
// with the grammars of staging/src/k8s.io/apimachinery/pkg/util/validation/validation.go
// (IsDNS1123Label, IsDNS1123Subdomain):
//   label      [a-z0-9]([-a-z0-9]*[a-z0-9])?, at most 63 bytes
//   subdomain  labels joined by '.', at most 253 bytes
// A pod UID is what the API server generates (a UUID, k8s.io/apimachinery/pkg/util/uuid); Prism
// accepts 1..64 ASCII letters, digits and '-', which is every UUID and never a path.
//
// A name that passes any of these has no '/', no NUL, is never "." or "..", and is safe to join
// into a file name, which the node agent does (docs/device-plugin.md, "Files on the node").
// Errors are InvalidArgument "<field>: <value quoted by QuoteBounded> is not a <kind> (...)".
// Pure; thread-safe.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace prism::config {

inline constexpr size_t kMaxDnsLabelBytes = 63;
inline constexpr size_t kMaxDnsSubdomainBytes = 253;
inline constexpr size_t kMaxPodUidBytes = 64;
// How much of a bad value an error message shows.
inline constexpr size_t kMaxQuotedBytes = 64;

bool IsDnsLabel(std::string_view s);
bool IsDnsSubdomain(std::string_view s);
bool IsPodUid(std::string_view s);

absl::Status ValidateContainerName(std::string_view name, std::string_view field);
absl::Status ValidateNamespace(std::string_view name, std::string_view field);
absl::Status ValidatePodName(std::string_view name, std::string_view field);
absl::Status ValidateNodeName(std::string_view name, std::string_view field);
absl::Status ValidatePodUid(std::string_view uid, std::string_view field);

// `value` in single quotes for an error message: printable ASCII as is except '\'' and '\\',
// every other byte as \xHH, at most kMaxQuotedBytes bytes of the value, then "...(N bytes)" when
// cut. A hostile value can neither flood a log nor forge a line in it.
std::string QuoteBounded(std::string_view value);

}  // namespace prism::config
