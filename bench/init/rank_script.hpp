#pragma once
// What one rank of a PyTorch job sends its TCPStore while `init_process_group` runs and a
// store barrier follows, byte for byte as PyTorch 2.x's client does over the 2.2+ dialect
// (TCPStore.cpp, rendezvous.py, distributed_c10d.py):
//   connect   VALIDATE + PING (TCPStore's constructor: TCPClient::connect, validate, ping)
//   init      ADD init/ 1 (waitForWorkers); rank 0, which hosts the store in PyTorch, then
//             reads init/ (a WAIT, then a GET) every 10 ms until all N ranks are counted
//   exchange  SET addr/<rank>; then for each key it needs, WAIT + GET (store.get): rank 0's
//             (the NCCL unique id every rank fetches) and, with peers > 1, the next ranks'
//   barrier   _store_based_barrier: ADD barrier 1, ADD barrier 0; the rank that counts N
//             SETs the last-worker key; every rank WAITs for it
// Pure: replies in, the next frame out; the I/O engine (init_load.hpp) moves the bytes.
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace ddp::bench {

// The phases a rank goes through, in order; the engine times the end of each.
enum class InitPhase : uint8_t { kConnect, kInit, kExchange, kBarrier, kDone };

struct InitPattern {
  int ranks = 1;
  // Address keys each rank reads: rank 0's and then the next peers - 1 ranks' (wrapping).
  int peers = 1;
  size_t value_bytes = 64;  // the size of each rank's address value
  // How often rank 0 re-reads the init counter (PyTorch: 10 ms).
  std::chrono::milliseconds poll_interval{10};
};

// The outcome of a reply: bytes to send now (possibly none), or rank 0's poll to repeat
// after poll_interval (the engine calls resume() then).
struct ScriptStep {
  std::string send;
  bool poll_later = false;
};

class RankScript {
 public:
  RankScript(int rank, const InitPattern& pattern);

  // The first frames, sent once the connection is up (VALIDATE + PING).
  [[nodiscard]] std::string start() const;
  // Bytes from the server. Consumes every complete reply and says what to send next.
  // Throws StoreError naming the rank for a reply that cannot be what was asked.
  ScriptStep received(std::string_view bytes);
  // Rank 0's poll interval passed: the next read of the init counter.
  [[nodiscard]] std::string resume();
  [[nodiscard]] InitPhase phase() const { return phase_; }
  [[nodiscard]] int rank() const { return rank_; }

 private:
  // Where the script is: which reply it waits for.
  enum class Stage : uint8_t {
    kPing,
    kInitAdd,
    kPollWait,
    kPollGet,
    kPollSleep,
    kPeerWait,
    kPeerGet,
    kBarrierAdd,
    kBarrierCount,
    kBarrierWait,
    kDone,
  };
  // The size of the reply the stage waits for, given what has arrived (0: not known yet).
  [[nodiscard]] size_t reply_size() const;
  // Acts on one complete reply; appends what to send to step.
  void advance(std::string_view reply, ScriptStep& step);
  [[nodiscard]] std::string exchange_start();
  [[nodiscard]] std::string peer_wait() const;
  [[nodiscard]] std::string peer_key(int i) const;
  [[nodiscard]] std::string poll_frame() const;
  [[noreturn]] void fail(const std::string& what) const;

  int rank_;
  const InitPattern* pattern_;
  Stage stage_ = Stage::kPing;
  InitPhase phase_ = InitPhase::kConnect;
  int peer_ = 0;    // the address key being read
  std::string in_;  // the reply so far
};

// The keys, as PyTorch names them where it has a name for them.
inline constexpr std::string_view kInitKey = "init/";
inline constexpr std::string_view kBarrierKey = "store_based_barrier_key:1";
inline constexpr std::string_view kLastWorkerKey = "store_based_barrier_key:1:last_worker";

}  // namespace ddp::bench
