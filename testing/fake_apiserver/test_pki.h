// testing/fake_apiserver/test_pki.h: a throwaway certificate authority for TLS tests.
//
// Generates, in memory, a CA, a server certificate for the given DNS names and IP addresses and a
// client certificate, all signed by that CA with fresh P-256 keys and valid for a few days. Tests
// trust the CA PEM, so the client's real certificate verification runs. Thread-safe (no state).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace prism::fakeapi {

struct TestPki {
  std::string ca_cert_pem;
  std::string server_cert_pem;
  std::string server_key_pem;
  std::string client_cert_pem;
  std::string client_key_pem;
};

// Internal if OpenSSL fails.
absl::StatusOr<TestPki> GenerateTestPki(const std::vector<std::string>& dns_names,
                                        const std::vector<std::string>& ip_addresses,
                                        const std::string& client_common_name);

}  // namespace prism::fakeapi
