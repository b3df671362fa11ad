#include "server/config/access_secrets.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

namespace encoderd::server {
namespace {

// Larger files are refused: no certificate bundle or token is this big, and
// the cap keeps a mistaken path (/dev/zero) from hanging start-up.
constexpr size_t kMaxFileBytes = 1 << 20;

Status FileError(const std::string& key, const std::string& path, const std::string& why) {
  return InvalidArgument("'" + key + "': file '" + path + "' " + why);
}

// The whole file at `path`, which `key` names.
StatusOr<std::string> ReadSecretFile(const std::string& key, const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!file) return FileError(key, path, std::string("cannot be opened: ") + std::strerror(errno));
  std::string text;
  char buffer[4096];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof(buffer), file.get())) > 0) {
    text.append(buffer, n);
    if (text.size() > kMaxFileBytes)
      return FileError(key, path, "is larger than " + std::to_string(kMaxFileBytes) + " bytes");
  }
  if (std::ferror(file.get()))
    return FileError(key, path, std::string("cannot be read: ") + std::strerror(errno));
  if (text.find_first_not_of(" \t\r\n") == std::string::npos)
    return FileError(key, path, "is empty");
  return text;
}

StatusOr<std::string> ReadPem(const std::string& key, const std::string& path, const char* block,
                              const char* what) {
  ASSIGN_OR_RETURN(std::string pem, ReadSecretFile(key, path));
  if (pem.find(block) == std::string::npos)
    return FileError(key, path, std::string("holds no PEM ") + what + " ('" + block + "')");
  return pem;
}

StatusOr<std::string> ReadToken(const std::string& key, const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadSecretFile(key, path));
  const size_t first = text.find_first_not_of(" \t\r\n");
  const size_t last = text.find_last_not_of(" \t\r\n");
  std::string token = text.substr(first, last - first + 1);
  // What an HTTP/2 header value can carry after "Bearer ": visible ASCII.
  for (const char c : token) {
    if (c < 0x21 || c > 0x7e)
      return FileError(key, path,
                       "holds a character a bearer token cannot carry (only visible ASCII, one "
                       "line)");
  }
  return token;
}

}  // namespace

StatusOr<AccessSecrets> ReadAccessSecrets(const ListenConfig& listen) {
  AccessSecrets secrets;
  const TlsConfig& tls = listen.tls;
  if (!tls.cert_file.empty()) {
    ASSIGN_OR_RETURN(secrets.tls_cert_pem, ReadPem("listen.tls.cert_file", tls.cert_file,
                                                   "-----BEGIN CERTIFICATE-----", "certificate"));
  }
  if (!tls.key_file.empty()) {
    ASSIGN_OR_RETURN(secrets.tls_key_pem, ReadPem("listen.tls.key_file", tls.key_file,
                                                  "PRIVATE KEY-----", "private key"));
  }
  if (!tls.client_ca_file.empty()) {
    ASSIGN_OR_RETURN(secrets.tls_client_ca_pem,
                     ReadPem("listen.tls.client_ca_file", tls.client_ca_file,
                             "-----BEGIN CERTIFICATE-----", "certificate"));
  }
  if (!listen.auth.bearer_token_file.empty()) {
    ASSIGN_OR_RETURN(secrets.bearer_token,
                     ReadToken("listen.auth.bearer_token_file", listen.auth.bearer_token_file));
  }
  return secrets;
}

}  // namespace encoderd::server
