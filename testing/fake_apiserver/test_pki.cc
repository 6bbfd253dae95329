#include "testing/fake_apiserver/test_pki.h"

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>
#include <mutex>
#include <random>

#include "base/strings.h"

namespace prism::fakeapi {
namespace {

struct KeyFree {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};
struct CertFree {
  void operator()(X509* cert) const { X509_free(cert); }
};
struct BioFree {
  void operator()(BIO* bio) const { BIO_free(bio); }
};
using KeyPtr = std::unique_ptr<EVP_PKEY, KeyFree>;
using CertPtr = std::unique_ptr<X509, CertFree>;

absl::Status OpenSslError(std::string_view what) {
  return absl::InternalError(StrCat("OpenSSL failed to ", what));
}

absl::StatusOr<std::string> ToPem(X509* cert, EVP_PKEY* key) {
  std::unique_ptr<BIO, BioFree> bio(BIO_new(BIO_s_mem()));
  if (!bio) return OpenSslError("allocate a BIO");
  int ok = cert != nullptr
               ? PEM_write_bio_X509(bio.get(), cert)
               : PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr);
  if (ok != 1) return OpenSslError("write PEM");
  char* data = nullptr;
  long size = BIO_get_mem_data(bio.get(), &data);  // NOLINT(runtime/int)
  return std::string(data, static_cast<size_t>(size));
}

absl::Status AddExtension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (ext == nullptr) return OpenSslError(StrCat("build extension ", value));
  int ok = X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  return ok == 1 ? absl::OkStatus() : OpenSslError("add an extension");
}

absl::StatusOr<CertPtr> MakeCert(const std::string& common_name, EVP_PKEY* key, X509* issuer,
                                 EVP_PKEY* issuer_key,
                                 const std::vector<std::pair<int, std::string>>& extensions) {
  CertPtr cert(X509_new());
  if (!cert) return OpenSslError("allocate a certificate");
  static std::mt19937_64 rng(std::random_device{}());
  static std::mutex rng_mu;
  long serial;  // NOLINT(runtime/int)
  {
    std::lock_guard<std::mutex> lock(rng_mu);
    serial = static_cast<long>(rng() & 0x7fffffffffffULL);  // NOLINT(runtime/int)
  }
  X509_set_version(cert.get(), 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), serial);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 7L * 24 * 3600);
  X509_set_pubkey(cert.get(), key);
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(common_name.c_str()), -1, -1,
                             0);
  X509* signer = issuer != nullptr ? issuer : cert.get();
  X509_set_issuer_name(cert.get(), X509_get_subject_name(signer));
  for (const auto& [nid, value] : extensions) {
    absl::Status status = AddExtension(cert.get(), signer, nid, value);
    if (!status.ok()) return status;
  }
  if (X509_sign(cert.get(), issuer_key, EVP_sha256()) == 0) return OpenSslError("sign");
  return cert;
}

}  // namespace

absl::StatusOr<TestPki> GenerateTestPki(const std::vector<std::string>& dns_names,
                                        const std::vector<std::string>& ip_addresses,
                                        const std::string& client_common_name) {
  KeyPtr ca_key(EVP_EC_gen("P-256"));
  KeyPtr server_key(EVP_EC_gen("P-256"));
  KeyPtr client_key(EVP_EC_gen("P-256"));
  if (!ca_key || !server_key || !client_key) return OpenSslError("generate keys");

  auto ca = MakeCert("prism-fake-apiserver-ca", ca_key.get(), nullptr, ca_key.get(),
                     {{NID_basic_constraints, "critical,CA:TRUE"},
                      {NID_key_usage, "critical,keyCertSign,cRLSign"},
                      {NID_subject_key_identifier, "hash"}});
  if (!ca.ok()) return ca.status();

  std::string san;
  for (const std::string& dns : dns_names) StrAppend(&san, san.empty() ? "" : ",", "DNS:", dns);
  for (const std::string& ip : ip_addresses) StrAppend(&san, san.empty() ? "" : ",", "IP:", ip);
  auto server = MakeCert(dns_names.empty() ? "localhost" : dns_names.front(), server_key.get(),
                         ca->get(), ca_key.get(),
                         {{NID_basic_constraints, "critical,CA:FALSE"},
                          {NID_key_usage, "critical,digitalSignature,keyEncipherment"},
                          {NID_ext_key_usage, "serverAuth"},
                          {NID_subject_alt_name, san},
                          {NID_authority_key_identifier, "keyid:always"}});
  if (!server.ok()) return server.status();
  auto client = MakeCert(client_common_name, client_key.get(), ca->get(), ca_key.get(),
                         {{NID_basic_constraints, "critical,CA:FALSE"},
                          {NID_key_usage, "critical,digitalSignature,keyEncipherment"},
                          {NID_ext_key_usage, "clientAuth"},
                          {NID_authority_key_identifier, "keyid:always"}});
  if (!client.ok()) return client.status();

  TestPki pki;
  auto assign = [](absl::StatusOr<std::string> pem, std::string* out) {
    if (!pem.ok()) return pem.status();
    *out = std::move(*pem);
    return absl::OkStatus();
  };
  for (auto status : {assign(ToPem(ca->get(), nullptr), &pki.ca_cert_pem),
                      assign(ToPem(server->get(), nullptr), &pki.server_cert_pem),
                      assign(ToPem(nullptr, server_key.get()), &pki.server_key_pem),
                      assign(ToPem(client->get(), nullptr), &pki.client_cert_pem),
                      assign(ToPem(nullptr, client_key.get()), &pki.client_key_pem)}) {
    if (!status.ok()) return status;
  }
  return pki;
}

}  // namespace prism::fakeapi
