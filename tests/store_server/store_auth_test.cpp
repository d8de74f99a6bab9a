// The job secret on the store server: native clients prove it (challenge-response, mutual);
// PyTorch connections are scoped to the worker namespace of the attempt they connected in,
// native ones without the secret confined to the current one.
#include <catch2/catch.hpp>
#include <string>

#include "rendezvous/store/auth.hpp"
#include "tests/store/raw_client.hpp"
#include "tests/support/stderr_capture.hpp"

using namespace ddp::rendezvous;
using namespace ddp::test;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using wire::Command;

namespace {

const std::string kSecret = "the job's secret";

StoreServerOptions with_secret(const std::string& secret = kSecret) {
  StoreServerOptions o = loopback();
  o.secret = secret;
  return o;
}

TcpStoreOptions client_options(uint16_t port, const std::string& secret) {
  TcpStoreOptions o;
  o.port = port;
  o.timeout = 5s;
  o.connect_timeout = 5s;
  o.secret = secret;
  return o;
}

// The message of the AuthError connecting with secret throws ("" when it connects).
std::string auth_refusal(uint16_t port, const std::string& secret) {
  try {
    TcpStore store(client_options(port, secret));
  } catch (const ddp::AuthError& e) {
    return e.what();
  }
  return "";
}

// A raw 2.x connection that negotiated kNative (the CHECK of the probe key).
Raw native(uint16_t port) {
  Raw raw(port);
  raw.send(req(Command::kCheck, {wire::kExtensionProbeKey}));
  REQUIRE(raw.recv_u8() == wire::kCheckReady);
  return raw;
}

}  // namespace

TEST_CASE("proofs: client and server MACs differ, depend on every input", "[auth]") {
  const std::string sn(auth::kNonceBytes, 's');
  const std::string cn(auth::kNonceBytes, 'c');
  const std::string proof = auth::client_proof(kSecret, sn, cn);
  CHECK(proof.size() == auth::kMacBytes);
  CHECK(auth::same_mac(proof, auth::client_proof(kSecret, sn, cn)));
  CHECK_FALSE(auth::same_mac(proof, auth::server_proof(kSecret, sn, cn)));
  CHECK_FALSE(auth::same_mac(proof, auth::client_proof("other", sn, cn)));
  CHECK_FALSE(auth::same_mac(proof, auth::client_proof(kSecret, cn, sn)));
  CHECK_FALSE(auth::same_mac(proof, proof.substr(1)));
  CHECK(auth::random_nonce() != auth::random_nonce());
}

TEST_CASE("a client with the secret does everything, presence included", "[auth]") {
  StoreServer server(with_secret());
  TcpStore store(client_options(server.port(), kSecret));
  store.set("/rdzv/key", "v");
  CHECK(store.get("/rdzv/key") == "v");
  CHECK(store.add("/rdzv/n", 2) == 2);
  store.wait({"/rdzv/key"}, 1s);
  auto presence = store.open_presence();
  REQUIRE(presence != nullptr);
  presence->set_ephemeral("/rdzv/alive", "1");
  CHECK(store.check({"/rdzv/alive"}));
}

TEST_CASE("no secret, a wrong one, or one the store lacks: a clear error, one server line",
          "[auth]") {
  const std::string address = "127.0.0.1:";
  SECTION("client without the secret") {
    StoreServer server(with_secret());
    StderrCapture log;
    const std::string why = auth_refusal(server.port(), "");
    CHECK_THAT(why, Contains("store " + address + std::to_string(server.port()) +
                             " refused authentication"));
    CHECK_THAT(why, Contains("check --secret_file / DDPLAUNCH_SECRET_FILE"));
    const auto lines = log.wait_lines(1);
    REQUIRE(lines.size() == 1);
    CHECK_THAT(lines[0], Contains("closing connection from 127.0.0.1:"));
    CHECK_THAT(lines[0], Contains("without proving the job secret"));
  }
  SECTION("wrong secret") {
    StoreServer server(with_secret());
    StderrCapture log;
    const std::string why = auth_refusal(server.port(), "not the secret");
    CHECK_THAT(why, Contains("store " + address + std::to_string(server.port()) +
                             " refused authentication: wrong secret"));
    const auto lines = log.wait_lines(1);
    REQUIRE(lines.size() == 1);
    CHECK_THAT(lines[0], Contains("closing connection from 127.0.0.1:"));
    CHECK_THAT(lines[0], Contains("wrong secret"));
  }
  SECTION("a store without a secret") {
    StoreServer server(loopback());
    StderrCapture log;
    const std::string why = auth_refusal(server.port(), kSecret);
    CHECK_THAT(why, Contains("store " + address + std::to_string(server.port()) +
                             " refused authentication: it has no secret"));
    const auto lines = log.wait_lines(1);
    REQUIRE(lines.size() == 1);
    CHECK_THAT(lines[0], Contains("closing connection from 127.0.0.1:"));
    CHECK_THAT(lines[0], Contains("the client has a secret but this store has none"));
  }
  SECTION("no secret on either side: open, as before") {
    StoreServer server(loopback());
    CHECK(auth_refusal(server.port(), "").empty());
  }
}

TEST_CASE("a proof is good for one challenge only, a forged one closes", "[auth]") {
  StoreServer server(with_secret());
  Raw raw = native(server.port());
  raw.send(req(Command::kAuthChallenge), wire::Dialect::kNative);
  REQUIRE(raw.recv_u8() == wire::kAuthRequired);
  const std::string server_nonce = raw.recv_string();
  REQUIRE(server_nonce.size() == auth::kNonceBytes);
  const std::string client_nonce = auth::random_nonce();
  raw.send(req(Command::kAuthProof, {client_nonce},
               {auth::client_proof(kSecret, server_nonce, client_nonce)}),
           wire::Dialect::kNative);
  REQUIRE(raw.recv_u8() == wire::kAuthAccepted);
  CHECK(auth::same_mac(raw.recv_string(), auth::server_proof(kSecret, server_nonce, client_nonce)));
  // Authenticated: anything goes.
  raw.send(req(Command::kSet, {"/rdzv/x"}, {"1"}), wire::Dialect::kNative);
  raw.send(req(Command::kGet, {"/rdzv/x"}), wire::Dialect::kNative);
  CHECK(raw.recv_string() == "1");

  // Replaying the same proof on a new connection (new nonce) is refused.
  Raw replay = native(server.port());
  replay.send(req(Command::kAuthChallenge), wire::Dialect::kNative);
  REQUIRE(replay.recv_u8() == wire::kAuthRequired);
  (void)replay.recv_string();
  replay.send(req(Command::kAuthProof, {client_nonce},
                  {auth::client_proof(kSecret, server_nonce, client_nonce)}),
              wire::Dialect::kNative);
  CHECK(replay.closed_by_server());

  // A proof without a challenge.
  Raw early = native(server.port());
  early.send(req(Command::kAuthProof, {client_nonce}, {std::string(32, 'x')}),
             wire::Dialect::kNative);
  CHECK(early.closed_by_server());
}

TEST_CASE("PyTorch connections are scoped to the attempt they connected in",
          "[auth][confine][scope]") {
  StoreServer server(with_secret());
  TcpStore agent(client_options(server.port(), kSecret));
  agent.set("/torchelastic/rdzv/state", "secret state");
  agent.set_worker_namespace("/worker/attempt_0/");
  const auto dialect = GENERATE(wire::Dialect::kV2, wire::Dialect::kLegacy);
  Raw raw(server.port(), dialect == wire::Dialect::kV2);

  SECTION("torch >= 2.6's bare keys, older torch's prefixed keys and init/ all work") {
    raw.send(req(Command::kSet, {"/default_pg/0"}, {"uid"}), dialect);
    raw.send(req(Command::kGet, {"/default_pg/0"}), dialect);
    CHECK(raw.recv_string() == "uid");
    wire::Request add = req(Command::kAdd, {"//worker/attempt_0/n"});
    add.delta = 3;
    raw.send(add, dialect);
    CHECK(raw.recv_i64() == 3);
    add.keys = {"init/"};
    add.delta = 1;
    raw.send(add, dialect);
    CHECK(raw.recv_i64() == 1);
    raw.send(req(Command::kCheck, {"/default_pg/0", "//worker/attempt_0/n", "init/"}), dialect);
    CHECK(raw.recv_u8() == wire::kCheckReady);
    // GETNUMKEYS counts the attempt's keys, as a fresh store per attempt would.
    raw.send(req(Command::kGetNumKeys), dialect);
    CHECK(raw.recv_i64() == 3);
    // Where they are stored: under the attempt's namespace, as they were named.
    CHECK(agent.get("/worker/attempt_0//default_pg/0") == "uid");
    CHECK(agent.get("/worker/attempt_0/init/") == "1");
  }
  SECTION("the agent's keys are out of reach: same names, other keys") {
    raw.send(req(Command::kCheck, {"/torchelastic/rdzv/state"}), dialect);
    CHECK(raw.recv_u8() == wire::kCheckNotReady);
    raw.send(req(Command::kSet, {"/torchelastic/rdzv/state"}, {"x"}), dialect);
    raw.send(req(Command::kDeleteKey, {"/torchelastic/rdzv/state"}), dialect);
    CHECK(raw.recv_i64() == 1);  // its own copy
    raw.send(req(Command::kDeleteKey, {"/torchelastic/rdzv/state"}), dialect);
    CHECK(raw.recv_i64() == 0);
    CHECK(agent.get("/torchelastic/rdzv/state") == "secret state");
  }
  SECTION("the next attempt's namespace scopes new connections; old ones keep theirs") {
    raw.send(req(Command::kSet, {"/default_pg/0"}, {"attempt 0's id"}), dialect);
    raw.send(req(Command::kCheck, {"/default_pg/0"}), dialect);  // the SET has run
    CHECK(raw.recv_u8() == wire::kCheckReady);
    agent.set_worker_namespace("/worker/attempt_1/");
    Raw next(server.port(), dialect == wire::Dialect::kV2);
    next.send(req(Command::kCheck, {"/default_pg/0"}), dialect);
    CHECK(next.recv_u8() == wire::kCheckNotReady);  // never the previous attempt's key
    next.send(req(Command::kSet, {"/default_pg/0"}, {"attempt 1's id"}), dialect);
    raw.send(req(Command::kGet, {"/default_pg/0"}), dialect);
    CHECK(raw.recv_string() == "attempt 0's id");
    next.send(req(Command::kGet, {"/default_pg/0"}), dialect);
    CHECK(next.recv_string() == "attempt 1's id");
  }
}

TEST_CASE("without the secret, a native connection may only name the current namespace",
          "[auth][confine]") {
  StoreServer server(with_secret());
  TcpStore agent(client_options(server.port(), kSecret));
  agent.set("/torchelastic/rdzv/state", "secret state");
  agent.set_worker_namespace("/worker/attempt_0/");

  SECTION("outside: the connection closes with one line naming peer, command and key") {
    struct Case {
      wire::Request request;
      const char* what;
    };
    const Case cases[] = {
        {req(Command::kGet, {"/torchelastic/rdzv/state"}), "GET of key '/torchelastic/rdzv/state'"},
        {req(Command::kSet, {"/torchelastic/rdzv/state"}, {"x"}), "SET of key"},
        {req(Command::kDeleteKey, {"/torchelastic/rdzv/state"}), "DELETE_KEY of key"},
        {req(Command::kSet, {"/worker/attempt_1/k"}, {"x"}), "'/worker/attempt_1/k'"},
        {req(Command::kSet, {"/worker/attempt_0"}, {"x"}), "'/worker/attempt_0'"},
        {req(Command::kCheck, {"/worker/attempt_0/k", "/other"}), "CHECK of key '/other'"},
        {req(Command::kSet, {"/worker/attempt_01/k"}, {"x"}), "'/worker/attempt_01/k'"},
        {req(Command::kSet, {"//worker/attempt_0/"}, {"x"}), "'//worker/attempt_0/'"},
        {req(Command::kListKeys), "LIST_KEYS outside a worker namespace"},
    };
    for (const auto& c : cases) {
      StderrCapture log;
      Raw raw = native(server.port());
      raw.send(c.request, wire::Dialect::kNative);
      CHECK(raw.closed_by_server());
      const auto lines = log.wait_lines(1);
      REQUIRE(lines.size() == 1);
      CHECK_THAT(lines[0], Contains("closing connection from 127.0.0.1:"));
      CHECK_THAT(lines[0], Contains(c.what));
    }
    CHECK(agent.get("/torchelastic/rdzv/state") == "secret state");
  }
  SECTION("kNative's own commands need the secret, the namespace too") {
    for (const auto& r :
         {req(Command::kOnClose, {"/rdzv/closed"}, {"1"}),
          req(Command::kEphemeral, {"/rdzv/x"}, {"1"}), req(Command::kClearCloseActions),
          req(Command::kWorkerNamespace, {"/"})}) {
      Raw raw = native(server.port());
      raw.send(r, wire::Dialect::kNative);
      CHECK(raw.closed_by_server());
    }
    Raw raw = native(server.port());
    raw.send(req(Command::kSet, {"/worker/attempt_0/k"}, {"v"}), wire::Dialect::kNative);
    raw.send(req(Command::kCheck, {"/worker/attempt_0/k"}), wire::Dialect::kNative);
    CHECK(raw.recv_u8() == wire::kCheckReady);
  }
}

TEST_CASE("before any namespace is declared, unauthenticated keys are all refused",
          "[auth][confine]") {
  StoreServer server(with_secret());
  Raw raw(server.port());
  raw.send(req(Command::kPing));  // harmless commands still work
  CHECK(raw.recv(4).size() == 4);
  raw.send(req(Command::kSet, {"/worker/attempt_0/k"}, {"v"}));
  CHECK(raw.closed_by_server());
}
