// src/k8s/errors.h: HTTP / Kubernetes `Status` failures as absl::Status.
//
// Every failed API call returns an absl::Status whose code follows the HTTP status, whose message
// keeps the API server's own `Status.message`, and whose payloads carry the HTTP status and the
// Kubernetes `reason` so callers can tell a `Conflict` from an `AlreadyExists`:
//
//   400, 413, 415, 422 -> InvalidArgument     401 -> Unauthenticated    403 -> PermissionDenied
//   404 -> NotFound      405 -> Unimplemented  409 AlreadyExists -> AlreadyExists, other 409 ->
//   Aborted 410 -> OutOfRange (resourceVersion / continue token too old: relist) 429 ->
//   ResourceExhausted                  5xx and connection failures -> Unavailable
//
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace prism::k8s {

// Builds the status for an HTTP reply. `body` is parsed as a Kubernetes `Status` object when it is
// one; otherwise up to 200 bytes of it go into the message. `context` (e.g. "get pods default/p")
// prefixes the message. `http_status` in [200, 300) returns OK.
absl::Status StatusFromHttp(int http_status, std::string_view body, std::string_view context);

// Builds the status for a Kubernetes `Status` object (`{"kind":"Status","code":410,...}`), as
// carried by a watch ERROR event.
absl::Status StatusFromStatusObject(int code, std::string_view reason, std::string_view message,
                                    std::string_view context);

// `status` with "context: " prepended to its message, keeping its code and payloads (the HTTP
// status and reason below), unlike prism::Annotate.
absl::Status WithContext(const absl::Status& status, std::string_view context);

// The HTTP status attached by StatusFromHttp, or 0.
int HttpStatusOf(const absl::Status& status);
// The Kubernetes reason (`Conflict`, `AlreadyExists`, `Expired`, `NotFound`...), or "".
std::string ReasonOf(const absl::Status& status);

// 409 Conflict: a stale resourceVersion (re-read and retry).
bool IsConflict(const absl::Status& status);
// 410 Gone / reason Expired: the requested resourceVersion or continue token is no longer
// available; the caller must relist.
bool IsGone(const absl::Status& status);
// (absl::IsNotFound and absl::IsAlreadyExists answer for 404 and 409 AlreadyExists.)
// Worth retrying the same request later (Unavailable, 429, 5xx).
bool IsRetryable(const absl::Status& status);

}  // namespace prism::k8s
