// TlsSession (server/net/tls_terminator.h) against an OpenSSL client over
// memory buffers, with certificates made here: a CA, a server certificate
// it signs, client certificates signed by it and by another CA.
#include "server/net/tls_terminator.h"

#include <gtest/gtest.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>
#include <string>

namespace encoderd::server {
namespace {

struct Issued {
  std::string cert_pem, key_pem;
  X509* cert = nullptr;
  EVP_PKEY* key = nullptr;
};

// What write(bio) writes to a memory BIO.
template <typename Write>
std::string Written(Write write) {
  BIO* bio = BIO_new(BIO_s_mem());
  write(bio);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  std::string text(data, static_cast<size_t>(n));
  BIO_free(bio);
  return text;
}

std::string Pem(X509* cert) {
  return Written([&](BIO* bio) { PEM_write_bio_X509(bio, cert); });
}

std::string Pem(EVP_PKEY* key) {
  return Written(
      [&](BIO* bio) { PEM_write_bio_PrivateKey(bio, key, nullptr, nullptr, 0, nullptr, nullptr); });
}

// A P-256 key and a certificate for `name`, signed by `issuer` (self-signed
// when null). Owned by the test's Certificates (freed at its end).
Issued Issue(const std::string& name, const Issued* issuer) {
  Issued out;
  out.key = EVP_EC_gen("P-256");
  out.cert = X509_new();
  X509_set_version(out.cert, 2);
  static long serial = 1;
  ASN1_INTEGER_set(X509_get_serialNumber(out.cert), serial++);
  X509_gmtime_adj(X509_getm_notBefore(out.cert), -3600);
  X509_gmtime_adj(X509_getm_notAfter(out.cert), 3600 * 24);
  X509_NAME* subject = X509_get_subject_name(out.cert);
  X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(name.c_str()), -1, -1, 0);
  X509_set_issuer_name(out.cert, issuer ? X509_get_subject_name(issuer->cert) : subject);
  X509_set_pubkey(out.cert, out.key);
  if (issuer == nullptr) {  // a CA
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, out.cert, out.cert, nullptr, nullptr, 0);
    X509_EXTENSION* ext =
        X509V3_EXT_conf_nid(nullptr, &ctx, NID_basic_constraints, "critical,CA:TRUE");
    X509_add_ext(out.cert, ext, -1);
    X509_EXTENSION_free(ext);
  }
  X509_sign(out.cert, issuer ? issuer->key : out.key, EVP_sha256());
  out.cert_pem = Pem(out.cert);
  out.key_pem = Pem(out.key);
  return out;
}

struct Certificates {
  Issued ca = Issue("encoderd test CA", nullptr);
  Issued server = Issue("localhost", &ca);
  Issued client = Issue("a client", &ca);
  Issued other_ca = Issue("another CA", nullptr);
  Issued stranger = Issue("a stranger", &other_ca);
  ~Certificates() {
    for (Issued* i : {&ca, &server, &client, &other_ca, &stranger}) {
      X509_free(i->cert);
      EVP_PKEY_free(i->key);
    }
  }
};

const Certificates& Certs() {
  static const Certificates* certs = new Certificates();
  return *certs;
}

std::shared_ptr<TlsContext> ServerContext(const std::string& client_ca = "", bool require = false) {
  TlsServerOptions options;
  options.cert_chain_pem = Certs().server.cert_pem;
  options.key_pem = Certs().server.key_pem;
  options.client_ca_pem = client_ca;
  options.require_client_cert = require;
  auto context = TlsContext::Create(options);
  EXPECT_TRUE(context.ok()) << context.status().message();
  return context.ok() ? std::move(context).value() : nullptr;
}

// An OpenSSL client over memory buffers, verifying the server against the
// test CA; `alpn` in wire format ("" offers none); `identity` its own
// certificate, if any.
class Client {
 public:
  explicit Client(const std::string& alpn = std::string("\x02h2", 3),
                  const Issued* identity = nullptr, int max_version = 0) {
    ctx_ = SSL_CTX_new(TLS_client_method());
    if (max_version != 0) SSL_CTX_set_max_proto_version(ctx_, max_version);
    X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx_), Certs().ca.cert);
    SSL_CTX_set_verify(ctx_, SSL_VERIFY_PEER, nullptr);
    if (identity != nullptr) {
      SSL_CTX_use_certificate(ctx_, identity->cert);
      SSL_CTX_use_PrivateKey(ctx_, identity->key);
    }
    if (!alpn.empty())
      SSL_CTX_set_alpn_protos(ctx_, reinterpret_cast<const unsigned char*>(alpn.data()),
                              static_cast<unsigned>(alpn.size()));
    ssl_ = SSL_new(ctx_);
    in_ = BIO_new(BIO_s_mem());
    out_ = BIO_new(BIO_s_mem());
    BIO_set_mem_eof_return(in_, -1);
    SSL_set_bio(ssl_, in_, out_);
    SSL_set_connect_state(ssl_);
    SSL_set_tlsext_host_name(ssl_, "localhost");
  }
  ~Client() {
    SSL_free(ssl_);
    SSL_CTX_free(ctx_);
  }

  // What the client has to send.
  std::string Take() {
    char* data = nullptr;
    const long n = BIO_get_mem_data(out_, &data);
    std::string bytes(data, static_cast<size_t>(n > 0 ? n : 0));
    (void)BIO_reset(out_);
    return bytes;
  }
  void Give(const std::string& bytes) {
    if (!bytes.empty()) BIO_write(in_, bytes.data(), static_cast<int>(bytes.size()));
  }
  // Advances the handshake; true once done.
  bool Handshake() { return SSL_do_handshake(ssl_) == 1; }
  void Write(const std::string& plain) {
    ASSERT_EQ(SSL_write(ssl_, plain.data(), static_cast<int>(plain.size())),
              static_cast<int>(plain.size()));
  }
  std::string Read() {
    std::string plain;
    char buf[4096];
    int n;
    while ((n = SSL_read(ssl_, buf, sizeof(buf))) > 0) plain.append(buf, static_cast<size_t>(n));
    return plain;
  }
  std::string Alpn() const {
    const unsigned char* p = nullptr;
    unsigned len = 0;
    SSL_get0_alpn_selected(ssl_, &p, &len);
    return std::string(reinterpret_cast<const char*>(p), len);
  }
  SSL* ssl() { return ssl_; }

 private:
  SSL_CTX* ctx_ = nullptr;
  SSL* ssl_ = nullptr;
  BIO* in_ = nullptr;
  BIO* out_ = nullptr;
};

// Passes bytes between the two until neither has more; false as soon as the
// session fails. Each of the client's bytes goes alone when byte_by_byte.
bool Pump(Client* client, TlsSession* session, std::string* plain, bool byte_by_byte = false) {
  for (int round = 0; round < 20; ++round) {
    client->Handshake();
    const std::string sent = client->Take();
    std::string back;
    if (byte_by_byte) {
      for (char b : sent)
        if (!session->FromClient(&b, 1, plain, &back)) return false;
    } else if (!sent.empty() && !session->FromClient(sent.data(), sent.size(), plain, &back)) {
      return false;
    }
    client->Give(back);
    if (sent.empty() && back.empty()) return true;
  }
  ADD_FAILURE() << "the bytes kept coming";
  return false;
}

TEST(TlsSessionTest, HandshakeAlpnAndDataBothWays) {
  TlsSession session(ServerContext());
  Client client;
  std::string plain;
  ASSERT_TRUE(Pump(&client, &session, &plain)) << session.error();
  EXPECT_TRUE(client.Handshake());
  EXPECT_TRUE(session.handshake_done());
  EXPECT_EQ(client.Alpn(), "h2");

  const std::string preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  const std::string big(200 * 1024, 'x');  // several records
  client.Write(preface);
  client.Write(big);
  ASSERT_TRUE(Pump(&client, &session, &plain)) << session.error();
  EXPECT_EQ(plain, preface + big);

  std::string records;
  session.ToClient(big.data(), big.size(), &records);
  session.ToClient("end", 3, &records);
  EXPECT_FALSE(session.failed());
  EXPECT_GT(records.size(), big.size());  // encrypted, with record overhead
  client.Give(records);
  EXPECT_EQ(client.Read(), big + "end");
}

TEST(TlsSessionTest, HandshakeSplitAtEveryByte) {
  TlsSession session(ServerContext());
  Client client;
  std::string plain;
  ASSERT_TRUE(Pump(&client, &session, &plain, /*byte_by_byte=*/true)) << session.error();
  client.Write("hello");
  ASSERT_TRUE(Pump(&client, &session, &plain, true)) << session.error();
  EXPECT_EQ(plain, "hello");
}

TEST(TlsSessionTest, PlaintextHttp2ClientFails) {
  TlsSession session(ServerContext());
  const std::string preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  std::string plain, back;
  EXPECT_FALSE(session.FromClient(preface.data(), preface.size(), &plain, &back));
  EXPECT_TRUE(session.failed());
  EXPECT_NE(session.error().find("TLS handshake failed"), std::string::npos) << session.error();
  EXPECT_TRUE(plain.empty());
  // Nothing more comes from a failed session.
  EXPECT_FALSE(session.FromClient("x", 1, &plain, &back));
}

TEST(TlsSessionTest, ClientOfferingOnlyOtherProtocolsIsRefused) {
  TlsSession session(ServerContext());
  Client client(std::string("\x08http/1.1", 9));
  std::string plain;
  EXPECT_FALSE(Pump(&client, &session, &plain));
  EXPECT_FALSE(session.handshake_done());
}

TEST(TlsSessionTest, ClientOfferingNoAlpnIsRefusedAtItsHello) {
  TlsSession session(ServerContext());
  Client client("");
  client.Handshake();
  const std::string hello = client.Take();
  std::string plain, back;
  EXPECT_FALSE(session.FromClient(hello.data(), hello.size(), &plain, &back));
  // No ServerHello, just the alert, so no key exchange was made for it.
  client.Give(back);
  ERR_clear_error();
  EXPECT_FALSE(client.Handshake());
  char reason[256];
  ERR_error_string_n(ERR_peek_last_error(), reason, sizeof(reason));
  EXPECT_NE(std::string(reason).find("no application protocol"), std::string::npos) << reason;
}

TEST(TlsSessionTest, Tls12) {
  TlsSession session(ServerContext());
  Client client(std::string("\x02h2", 3), nullptr, TLS1_2_VERSION);
  std::string plain;
  ASSERT_TRUE(Pump(&client, &session, &plain)) << session.error();
  EXPECT_EQ(SSL_version(client.ssl()), TLS1_2_VERSION);
  EXPECT_EQ(client.Alpn(), "h2");
  client.Write("twelve");
  ASSERT_TRUE(Pump(&client, &session, &plain)) << session.error();
  EXPECT_EQ(plain, "twelve");
  // One of gRPC's suites: ECDHE, AES-GCM.
  const std::string cipher = SSL_get_cipher_name(client.ssl());
  EXPECT_NE(cipher.find("ECDHE"), std::string::npos) << cipher;
  EXPECT_NE(cipher.find("GCM"), std::string::npos) << cipher;
}

TEST(TlsSessionTest, KeyUpdateFloodFails) {
  TlsSession session(ServerContext());
  Client client;
  std::string plain;
  ASSERT_TRUE(Pump(&client, &session, &plain));
  // A few KeyUpdates are a client's right; then data resets the count.
  for (int i = 0; i < 8; ++i) {
    ASSERT_EQ(SSL_key_update(client.ssl(), SSL_KEY_UPDATE_NOT_REQUESTED), 1);
    client.Handshake();
  }
  client.Write("still here");
  ASSERT_TRUE(Pump(&client, &session, &plain)) << session.error();
  EXPECT_EQ(plain, "still here");
  // 40 more, then data in the same bytes (one SSL_read goes through all of
  // them before the data): refused.
  for (int i = 0; i < 40; ++i) {
    ASSERT_EQ(SSL_key_update(client.ssl(), SSL_KEY_UPDATE_NOT_REQUESTED), 1);
    client.Handshake();
  }
  client.Write("x");
  std::string back;
  const std::string updates = client.Take();
  EXPECT_FALSE(session.FromClient(updates.data(), updates.size(), &plain, &back));
  EXPECT_NE(session.error().find("too many handshake messages"), std::string::npos)
      << session.error();
}

TEST(TlsSessionTest, AFirstRequestBeyond64KiBInTheFinishedsReadIsServed) {
  // A TLS 1.3 client sends its request right after its Finished: one read
  // may hold both, and the request does not count as handshake bytes.
  TlsSession session(ServerContext());
  Client client;
  client.Handshake();
  std::string plain, back;
  const std::string hello = client.Take();
  ASSERT_TRUE(session.FromClient(hello.data(), hello.size(), &plain, &back)) << session.error();
  client.Give(back);
  ASSERT_TRUE(client.Handshake());  // its Finished written, not yet sent
  const std::string request(100 * 1024, 'r');
  client.Write(request);
  const std::string bytes = client.Take();
  ASSERT_GT(bytes.size(), size_t{64 * 1024});
  ASSERT_TRUE(session.FromClient(bytes.data(), bytes.size(), &plain, &back)) << session.error();
  EXPECT_TRUE(session.handshake_done());
  EXPECT_EQ(plain, request);
}

TEST(TlsSessionTest, OverlongHandshakeFails) {
  TlsSession session(ServerContext());
  // A ClientHello announced at 65,535 bytes, sent in full-size records:
  // the session gives up at 64 KiB, before OpenSSL has the whole message.
  std::string records;
  for (int r = 0; r < 4; ++r) {
    records += std::string("\x16\x03\x01\x40\x00", 5);
    std::string body(16384, '\0');
    if (r == 0) body.replace(0, 4, std::string("\x01\x00\xff\xff", 4));
    records += body;
  }
  std::string plain, back;
  EXPECT_FALSE(session.FromClient(records.data(), records.size(), &plain, &back));
  EXPECT_NE(session.error().find("over 64 KiB"), std::string::npos) << session.error();
}

TEST(TlsSessionTest, MutualTls) {
  const auto context = ServerContext(Certs().ca.cert_pem, /*require=*/true);
  {
    TlsSession session(context);
    Client client(std::string("\x02h2", 3), &Certs().client);
    std::string plain;
    ASSERT_TRUE(Pump(&client, &session, &plain)) << session.error();
    client.Write("signed");
    ASSERT_TRUE(Pump(&client, &session, &plain)) << session.error();
    EXPECT_EQ(plain, "signed");
  }
  for (const Issued* identity : {static_cast<const Issued*>(nullptr), &Certs().stranger}) {
    TlsSession session(context);
    Client client(std::string("\x02h2", 3), identity);
    std::string plain;
    // TLS 1.3: the client finishes first; the server refuses its certificate
    // (or its lack of one) on reading it.
    EXPECT_FALSE(Pump(&client, &session, &plain)) << (identity ? "a stranger" : "no certificate");
    EXPECT_TRUE(plain.empty());
  }
}

TEST(TlsSessionTest, ClientCertificateOptionalWithoutRequire) {
  const auto context = ServerContext(Certs().ca.cert_pem, /*require=*/false);
  {
    TlsSession session(context);
    Client client;
    std::string plain;
    ASSERT_TRUE(Pump(&client, &session, &plain)) << session.error();
    client.Write("anonymous");
    ASSERT_TRUE(Pump(&client, &session, &plain)) << session.error();
    EXPECT_EQ(plain, "anonymous");
  }
  // A certificate, when presented, must still be the CA's.
  TlsSession session(context);
  Client client(std::string("\x02h2", 3), &Certs().stranger);
  std::string plain;
  EXPECT_FALSE(Pump(&client, &session, &plain));
}

TEST(TlsSessionTest, CloseNotify) {
  TlsSession session(ServerContext());
  Client client;
  std::string plain;
  ASSERT_TRUE(Pump(&client, &session, &plain));
  client.Write("last");
  SSL_shutdown(client.ssl());
  ASSERT_TRUE(Pump(&client, &session, &plain)) << session.error();
  EXPECT_EQ(plain, "last");
  EXPECT_TRUE(session.client_closed());
}

// The server's end: a close_notify the client reads as TLS's orderly end
// (SSL_ERROR_ZERO_RETURN, not "unexpected eof"), after everything sent
// before it; nothing more goes out after it, and nothing before the
// handshake.
TEST(TlsSessionTest, CloseSendsCloseNotifyOnce) {
  for (const int max_version : {0, TLS1_2_VERSION}) {
    SCOPED_TRACE(max_version == 0 ? "TLS 1.3" : "TLS 1.2");
    TlsSession session(ServerContext());
    std::string out;
    session.Close(&out);
    EXPECT_TRUE(out.empty()) << "a close_notify before the handshake";
    Client client(std::string("\x02h2", 3), nullptr, max_version);
    std::string plain;
    ASSERT_TRUE(Pump(&client, &session, &plain));
    session.ToClient("bye", 3, &out);
    session.Close(&out);
    const size_t closed = out.size();
    session.Close(&out);
    session.ToClient("more", 4, &out);
    EXPECT_EQ(out.size(), closed) << "bytes after the close_notify";
    EXPECT_FALSE(session.failed()) << session.error();
    client.Give(out);
    EXPECT_EQ(client.Read(), "bye");
    char byte;
    const int n = SSL_read(client.ssl(), &byte, 1);
    EXPECT_EQ(n, 0);
    EXPECT_EQ(SSL_get_error(client.ssl(), n), SSL_ERROR_ZERO_RETURN);
    EXPECT_TRUE(SSL_get_shutdown(client.ssl()) & SSL_RECEIVED_SHUTDOWN);
  }
}

TEST(TlsSessionTest, GarbageAfterTheHandshakeFails) {
  TlsSession session(ServerContext());
  Client client;
  std::string plain, back;
  ASSERT_TRUE(Pump(&client, &session, &plain));
  const std::string junk = std::string("\x17\x03\x03\x00\x20", 5) + std::string(32, 'j');
  EXPECT_FALSE(session.FromClient(junk.data(), junk.size(), &plain, &back));
  EXPECT_NE(session.error().find("a TLS record from the client failed"), std::string::npos)
      << session.error();
}

TEST(TlsContextTest, RefusesWhatCannotServe) {
  // Create(options) fails, its message naming `what`.
  const auto refused = [](const TlsServerOptions& options, const std::string& what) {
    auto context = TlsContext::Create(options);
    ASSERT_FALSE(context.ok()) << what;
    EXPECT_NE(context.status().message().find(what), std::string::npos)
        << context.status().message();
  };
  TlsServerOptions options;
  options.cert_chain_pem = Certs().server.cert_pem;
  options.key_pem = Certs().client.key_pem;  // another certificate's key
  refused(options, "not a matching pair");

  options.key_pem = Certs().server.key_pem;
  options.cert_chain_pem = "not a certificate";
  refused(options, "listen.tls.cert_file");

  options.cert_chain_pem = Certs().server.cert_pem;
  options.key_pem = Certs().server.cert_pem;  // no key in it
  refused(options, "listen.tls.key_file");

  // An encrypted key: refused, with no passphrase asked for.
  options.key_pem = Written([](BIO* bio) {
    PEM_write_bio_PrivateKey(bio, Certs().server.key, EVP_aes_256_cbc(),
                             reinterpret_cast<const unsigned char*>("secret"), 6, nullptr, nullptr);
  });
  ASSERT_NE(options.key_pem.find("ENCRYPTED"), std::string::npos);
  refused(options, "encrypted key");

  options.key_pem = Certs().server.key_pem;
  options.client_ca_pem = "no CA here";
  refused(options, "listen.tls.client_ca_file");

  // A chain: the server certificate, then its CA.
  options.client_ca_pem.clear();
  options.cert_chain_pem = Certs().server.cert_pem + Certs().ca.cert_pem;
  EXPECT_TRUE(TlsContext::Create(options).ok());
}

}  // namespace
}  // namespace encoderd::server
