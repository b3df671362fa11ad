#include "server/net/tls_terminator.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <algorithm>
#include <climits>
#include <utility>

namespace encoderd::server {
namespace {

// OpenSSL's reasons for the last failure on this thread, oldest first; the
// queue is left empty.
std::string OpenSslErrors() {
  std::string text;
  char line[256];
  while (const unsigned long e = ERR_get_error()) {
    ERR_error_string_n(e, line, sizeof(line));
    if (!text.empty()) text += "; ";
    text += line;
  }
  return text.empty() ? "no reason given" : text;
}

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;

BioPtr PemBio(const std::string& pem) {
  return BioPtr(
      BIO_new_mem_buf(pem.data(), static_cast<int>(std::min<size_t>(pem.size(), INT_MAX))));
}

// A client's bytes the session takes before its handshake is done: a
// ClientHello is a few KiB, a client's certificates (mutual TLS) up to
// kMaxClientCertificates more.
constexpr size_t kMaxHandshakeBytes = 64 * 1024;
constexpr long kMaxClientCertificates = 32 * 1024;
// Handshake messages a client may send after the handshake (TLS 1.3
// KeyUpdate; a TLS 1.2 ClientHello asking to renegotiate, which is refused):
// each costs the guard's thread work and relays nothing. A client rekeys to
// bound what one key encrypts, so it is allowed kBaseHandshakeMessages,
// then one more per kPlaintextPerHandshakeMessage it sent.
constexpr int64_t kBaseHandshakeMessages = 32;
constexpr int64_t kPlaintextPerHandshakeMessage = 1 << 20;
// The TLS 1.2 cipher suites gRPC 1.51 offers (forward secrecy, AEAD only);
// TLS 1.3's are OpenSSL's defaults, all of them AEAD.
constexpr char kTls12Ciphers[] =
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:"
    "ECDHE-RSA-AES128-GCM-SHA256:ECDHE-RSA-AES256-GCM-SHA384";

// A PEM passphrase callback that gives none: an encrypted key fails to load
// instead of OpenSSL asking for its passphrase on the terminal.
int NoPassphrase(char*, int, int, void*) { return 0; }

// Chooses "h2" from the client's ALPN list; a client that offers ALPN but
// not h2 is refused (gRPC speaks only HTTP/2).
int SelectAlpn(SSL*, const unsigned char** out, unsigned char* out_len, const unsigned char* in,
               unsigned int in_len, void*) {
  static const unsigned char kH2[] = {2, 'h', '2'};
  unsigned char* selected = nullptr;
  unsigned char selected_len = 0;
  if (SSL_select_next_proto(&selected, &selected_len, kH2, sizeof(kH2), in, in_len) !=
      OPENSSL_NPN_NEGOTIATED)
    return SSL_TLSEXT_ERR_ALERT_FATAL;
  *out = selected;
  *out_len = selected_len;
  return SSL_TLSEXT_ERR_OK;
}

// Refuses a ClientHello without ALPN before any key exchange or signature
// is made for it, with a no_application_protocol alert (gRPC's TLS refuses
// such a client after its handshake). The ALPN callback, which OpenSSL
// calls only when the extension is there, refuses one without h2.
int RequireAlpn(SSL* ssl, int* alert, void*) {
  const unsigned char* ext = nullptr;
  size_t len = 0;
  if (SSL_client_hello_get0_ext(ssl, TLSEXT_TYPE_application_layer_protocol_negotiation, &ext,
                                &len) == 1)
    return SSL_CLIENT_HELLO_SUCCESS;
  *alert = SSL_AD_NO_APPLICATION_PROTOCOL;
  return SSL_CLIENT_HELLO_ERROR;
}

}  // namespace

struct TlsContext::Impl {
  SSL_CTX* ctx = nullptr;
  ~Impl() { SSL_CTX_free(ctx); }
};

TlsContext::~TlsContext() = default;

StatusOr<std::shared_ptr<TlsContext>> TlsContext::Create(const TlsServerOptions& options) {
  ERR_clear_error();
  std::shared_ptr<TlsContext> context(new TlsContext());
  context->impl_ = std::make_unique<Impl>();
  SSL_CTX* ctx = context->impl_->ctx = SSL_CTX_new(TLS_server_method());
  if (ctx == nullptr) return Internal("TLS: cannot make a context: " + OpenSslErrors());
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  // A client cannot make the guard's thread renegotiate, and nothing keeps
  // sessions: each connection is one full handshake, as gRPC's own TLS
  // port did.
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_TICKET);
  SSL_CTX_set_num_tickets(ctx, 0);
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  // An idle connection holds no read or write buffer.
  SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
  SSL_CTX_set_alpn_select_cb(ctx, SelectAlpn, nullptr);
  SSL_CTX_set_client_hello_cb(ctx, RequireAlpn, nullptr);

  SSL_CTX_set_max_cert_list(ctx, kMaxClientCertificates);
  if (SSL_CTX_set_cipher_list(ctx, kTls12Ciphers) != 1)
    return Internal("TLS: cannot set the cipher suites: " + OpenSslErrors());

  BioPtr chain = PemBio(options.cert_chain_pem);
  // _AUX: a TRUSTED CERTIFICATE block too, as gRPC reads the leaf.
  X509* cert = chain ? PEM_read_bio_X509_AUX(chain.get(), nullptr, NoPassphrase, nullptr) : nullptr;
  if (cert == nullptr)
    return InvalidArgument("listen.tls.cert_file: no PEM certificate could be read (" +
                           OpenSslErrors() + ")");
  const int used = SSL_CTX_use_certificate(ctx, cert);
  X509_free(cert);
  if (used != 1)
    return InvalidArgument("listen.tls.cert_file: the certificate cannot be used (" +
                           OpenSslErrors() + ")");
  while (X509* next = PEM_read_bio_X509(chain.get(), nullptr, NoPassphrase, nullptr)) {
    if (SSL_CTX_add0_chain_cert(ctx, next) != 1) {  // takes `next` only when it succeeds
      X509_free(next);
      return InvalidArgument("listen.tls.cert_file: a chain certificate cannot be used (" +
                             OpenSslErrors() + ")");
    }
  }
  ERR_clear_error();  // the end of the PEM text

  BioPtr key_bio = PemBio(options.key_pem);
  EVP_PKEY* key =
      key_bio ? PEM_read_bio_PrivateKey(key_bio.get(), nullptr, NoPassphrase, nullptr) : nullptr;
  if (key == nullptr)
    return InvalidArgument(
        "listen.tls.key_file: no PEM private key could be read (an encrypted key is not "
        "supported; " +
        OpenSslErrors() + ")");
  const int key_used = SSL_CTX_use_PrivateKey(ctx, key);
  EVP_PKEY_free(key);
  if (key_used != 1 || SSL_CTX_check_private_key(ctx) != 1)
    return InvalidArgument(
        "listen.tls.cert_file and listen.tls.key_file are not a matching pair (" + OpenSslErrors() +
        ")");

  if (!options.client_ca_pem.empty()) {
    BioPtr ca_bio = PemBio(options.client_ca_pem);
    X509_STORE* store = SSL_CTX_get_cert_store(ctx);
    STACK_OF(X509_NAME)* names = sk_X509_NAME_new_null();
    bool out_of_memory = names == nullptr;
    int count = 0;
    while (X509* ca =
               ca_bio ? PEM_read_bio_X509(ca_bio.get(), nullptr, NoPassphrase, nullptr) : nullptr) {
      X509_STORE_add_cert(store, ca);
      X509_NAME* name = X509_NAME_dup(X509_get_subject_name(ca));
      if (name == nullptr || names == nullptr || sk_X509_NAME_push(names, name) == 0) {
        X509_NAME_free(name);
        out_of_memory = true;
      }
      X509_free(ca);
      ++count;
    }
    ERR_clear_error();
    if (count == 0 || out_of_memory) {
      sk_X509_NAME_pop_free(names, X509_NAME_free);
      return count == 0
                 ? InvalidArgument("listen.tls.client_ca_file: no PEM certificate could be read")
                 : Internal("TLS: out of memory reading listen.tls.client_ca_file");
    }
    // The CAs' names go to the client, which picks its certificate by them.
    SSL_CTX_set_client_CA_list(ctx, names);
    SSL_CTX_set_verify(
        ctx, SSL_VERIFY_PEER | (options.require_client_cert ? SSL_VERIFY_FAIL_IF_NO_PEER_CERT : 0),
        nullptr);
  }
  return context;
}

struct TlsSession::Impl {
  SSL* ssl = nullptr;
  BIO* in = nullptr;          // the client's bytes, for OpenSSL to read
  BIO* out = nullptr;         // what OpenSSL wrote for the client
  ~Impl() { SSL_free(ssl); }  // frees both BIOs
};

TlsSession::TlsSession(std::shared_ptr<TlsContext> context)
    : context_(std::move(context)), impl_(std::make_unique<Impl>()) {
  ERR_clear_error();
  impl_->ssl = SSL_new(context_->impl_->ctx);
  impl_->in = BIO_new(BIO_s_mem());
  impl_->out = BIO_new(BIO_s_mem());
  if (impl_->ssl == nullptr || impl_->in == nullptr || impl_->out == nullptr) {
    BIO_free(impl_->in);
    BIO_free(impl_->out);
    impl_->in = impl_->out = nullptr;
    Fail("cannot start a TLS session");
    return;
  }
  // Reading past what the client sent so far asks for more (WANT_READ), not EOF.
  BIO_set_mem_eof_return(impl_->in, -1);
  SSL_set_bio(impl_->ssl, impl_->in, impl_->out);
  SSL_set_accept_state(impl_->ssl);
  SSL_set_msg_callback(impl_->ssl, &TlsSession::OnMessage);
  SSL_set_msg_callback_arg(impl_->ssl, this);
}

void TlsSession::OnMessage(int write_p, int, int content_type, const void*, size_t, SSL*,
                           void* arg) {
  auto* session = static_cast<TlsSession*>(arg);
  if (!write_p && content_type == SSL3_RT_HANDSHAKE && session->handshake_done_)
    ++session->handshake_messages_after_;
}

TlsSession::~TlsSession() = default;

bool TlsSession::Fail(const char* what) {
  failed_ = true;
  error_ = std::string(what) + ": " + OpenSslErrors();
  return false;
}

void TlsSession::Drain(std::string* to_client) {
  if (impl_->out == nullptr) return;
  // BIO_read, not BIO_reset: a reset clears the BIO's whole buffer.
  const size_t n = BIO_ctrl_pending(impl_->out);
  if (n == 0) return;
  const size_t at = to_client->size();
  to_client->resize(at + n);
  const int got = BIO_read(impl_->out, to_client->data() + at, static_cast<int>(n));
  to_client->resize(at + static_cast<size_t>(got > 0 ? got : 0));
}

bool TlsSession::FromClient(const char* data, size_t n, std::string* plain,
                            std::string* to_client) {
  if (failed_) return false;
  ERR_clear_error();
  if (!handshake_done_) handshake_bytes_ += n;
  while (n > 0) {
    const int chunk = static_cast<int>(std::min<size_t>(n, INT_MAX));
    if (BIO_write(impl_->in, data, chunk) != chunk) return Fail("out of memory for TLS");
    data += chunk;
    n -= static_cast<size_t>(chunk);
  }
  SSL* ssl = impl_->ssl;
  if (!handshake_done_) {
    ERR_clear_error();
    const int r = SSL_do_handshake(ssl);
    if (r != 1) {
      const int e = SSL_get_error(ssl, r);
      Drain(to_client);  // the next handshake records, or an alert
      if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE)
        return Fail("TLS handshake failed");
      // Still incomplete: what the client sent after its last handshake
      // message (a TLS 1.3 client's first request) never counts here.
      if (handshake_bytes_ > kMaxHandshakeBytes)
        return Fail("TLS handshake failed: over 64 KiB sent before it completed");
      return true;
    }
    // A backstop for RequireAlpn: no protocol negotiated, no connection.
    const unsigned char* alpn = nullptr;
    unsigned alpn_len = 0;
    SSL_get0_alpn_selected(ssl, &alpn, &alpn_len);
    if (alpn_len == 0) {
      Drain(to_client);
      return Fail("TLS handshake failed: the client offered no ALPN protocol (h2)");
    }
    handshake_done_ = true;
  }
  char buf[16 * 1024];
  while (!client_closed_) {
    ERR_clear_error();
    const int r = SSL_read(ssl, buf, sizeof(buf));
    // One SSL_read goes through every KeyUpdate ahead of the next record of
    // data: the count is judged after each, whatever it returned.
    if (r > 0) plaintext_bytes_ += static_cast<int64_t>(r);
    if (handshake_messages_after_ >
        kBaseHandshakeMessages + plaintext_bytes_ / kPlaintextPerHandshakeMessage) {
      Drain(to_client);
      return Fail(
          "TLS: too many handshake messages after the handshake (KeyUpdates: 32, then one a "
          "MiB of data)");
    }
    if (r > 0) {
      plain->append(buf, static_cast<size_t>(r));
      continue;
    }
    const int e = SSL_get_error(ssl, r);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) break;
    if (e == SSL_ERROR_ZERO_RETURN) {
      client_closed_ = true;
      break;
    }
    Drain(to_client);
    return Fail("a TLS record from the client failed");
  }
  Drain(to_client);
  return true;
}

void TlsSession::ToClient(const char* data, size_t n, std::string* to_client) {
  if (failed_ || closed_) return;
  if (!handshake_done_) {
    Fail("TLS: plaintext for the client before the handshake completed");
    return;
  }
  while (n > 0) {
    ERR_clear_error();
    // A memory BIO takes everything: SSL_write writes all of the chunk.
    const int chunk = static_cast<int>(std::min<size_t>(n, INT_MAX / 2));
    if (SSL_write(impl_->ssl, data, chunk) != chunk) {
      Fail("TLS: cannot write to the client");
      break;
    }
    data += chunk;
    n -= static_cast<size_t>(chunk);
  }
  Drain(to_client);
}

void TlsSession::Close(std::string* to_client) {
  if (closed_ || failed_ || !handshake_done_) return;
  closed_ = true;
  ERR_clear_error();
  // Writes the alert into the memory BIO and returns 0: the client's own
  // close_notify is not waited for (the guard closes the socket).
  SSL_shutdown(impl_->ssl);
  ERR_clear_error();
  Drain(to_client);
}

}  // namespace encoderd::server
