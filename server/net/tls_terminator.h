// TLS for the connection guard (connection_guard.h): the guard reads the
// client's bytes, a TlsSession turns them into the plaintext HTTP/2 that
// the guard inspects and relays to gRPC, and turns gRPC's plaintext answers
// (and the guard's own) into TLS records for the client. So a TLS port has
// every defence a plaintext one has. OpenSSL over memory buffers: the
// session never touches the socket, and its state is only what it holds.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"

struct ssl_st;  // OpenSSL's SSL, for TlsSession::OnMessage

namespace encoderd::server {

struct TlsServerOptions {
  // PEM: the server's certificate (then its chain), and its private key.
  std::string cert_chain_pem;
  std::string key_pem;
  // PEM CA bundle; set: a client's certificate is asked for and verified
  // against it, and with require_client_cert a client without one is refused.
  std::string client_ca_pem;
  bool require_client_cert = false;
};

// The certificate, key and rules every session of a port shares.
class TlsContext {
 public:
  // INVALID_ARGUMENT naming what is wrong: a PEM that does not parse, or a
  // certificate and key that are not a pair.
  static StatusOr<std::shared_ptr<TlsContext>> Create(const TlsServerOptions& options);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

 private:
  friend class TlsSession;
  TlsContext() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// One connection's TLS, server side: TLS 1.2 (gRPC's cipher suites) or 1.3,
// ALPN "h2" (a client offering no ALPN or only other protocols is refused,
// as gRPC's TLS refuses it), no renegotiation, no session tickets. A client
// is refused past 64 KiB sent with its handshake still incomplete, or past
// 32 handshake messages after it (KeyUpdates) plus one a MiB of data it
// sent: work for the guard's one thread that relays nothing.
class TlsSession {
 public:
  explicit TlsSession(std::shared_ptr<TlsContext> context);
  ~TlsSession();
  TlsSession(const TlsSession&) = delete;
  TlsSession& operator=(const TlsSession&) = delete;

  // Takes n bytes the client sent: appends the plaintext they complete to
  // *plain, and what must go back to the client (handshake records, an
  // alert) to *to_client. False once the handshake failed or a record did
  // not decrypt (error() says why): *to_client may hold an alert to send
  // before closing; nothing more comes from the session.
  bool FromClient(const char* data, size_t n, std::string* plain, std::string* to_client);
  // Appends n plaintext bytes for the client, as TLS records, to *to_client.
  // Only once handshake_done() (the guard has plaintext to send only after
  // the client's first plaintext bytes); before, the session fails.
  // After Close, nothing: the bytes are dropped.
  void ToClient(const char* data, size_t n, std::string* to_client);
  // Appends a close_notify alert to *to_client, once: the end of what the
  // session sends, so that the client's TLS sees the connection end in
  // order and not cut off (OpenSSL reports an end without one as "unexpected
  // eof while reading", Python's ssl as SSLEOFError). Nothing before the
  // handshake completed or once the session failed.
  void Close(std::string* to_client);

  bool handshake_done() const { return handshake_done_; }
  // Bytes FromClient took before the handshake completed.
  size_t handshake_bytes() const { return handshake_bytes_; }
  // FromClient or ToClient failed: the connection must close.
  bool failed() const { return failed_; }
  // The client ended its side with a close_notify alert.
  bool client_closed() const { return client_closed_; }
  const std::string& error() const { return error_; }

 private:
  // Moves what OpenSSL wrote for the client to *to_client.
  void Drain(std::string* to_client);
  bool Fail(const char* what);
  // OpenSSL's message callback (SSL_set_msg_callback): counts the client's
  // handshake messages after the handshake.
  static void OnMessage(int write_p, int version, int content_type, const void* buf, size_t len,
                        ::ssl_st* ssl, void* arg);

  std::shared_ptr<TlsContext> context_;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  bool handshake_done_ = false;
  bool client_closed_ = false;
  bool closed_ = false;  // Close was called
  bool failed_ = false;
  size_t handshake_bytes_ = 0;            // the client's, before handshake_done_
  int64_t handshake_messages_after_ = 0;  // the client's, after handshake_done_
  int64_t plaintext_bytes_ = 0;           // decrypted so far
  std::string error_;
};

}  // namespace encoderd::server
