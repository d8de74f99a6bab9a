#include "rank_script.hpp"

#include <charconv>

#include "common/error.hpp"
#include "rendezvous/store/wire_codec.hpp"

namespace ddp::bench {

namespace wire = rendezvous::wire;
using wire::Command;

namespace {

std::string frame(Command command, std::vector<std::string> keys = {},
                  std::vector<std::string> values = {}) {
  wire::Request request;
  request.command = command;
  request.keys = std::move(keys);
  request.values = std::move(values);
  return wire::encode_request(request, wire::Dialect::kV2);
}

std::string add(std::string_view key, int64_t delta) {
  wire::Request request;
  request.command = Command::kAdd;
  request.keys = {std::string(key)};
  request.delta = delta;
  return wire::encode_request(request, wire::Dialect::kV2);
}

// The nonce a rank's PING carries (PyTorch sends its pid; ranks here share one).
uint32_t ping_nonce(int rank) {
  return 0x5EED0000U ^ static_cast<uint32_t>(rank);
}

}  // namespace

RankScript::RankScript(int rank, const InitPattern& pattern) : rank_(rank), pattern_(&pattern) {}

std::string RankScript::start() const {
  wire::Request validate;
  validate.command = Command::kValidate;
  validate.nonce = wire::kValidationMagic;
  wire::Request ping;
  ping.command = Command::kPing;
  ping.nonce = ping_nonce(rank_);
  return wire::encode_request(validate, wire::Dialect::kV2) +
         wire::encode_request(ping, wire::Dialect::kV2);
}

size_t RankScript::reply_size() const {
  switch (stage_) {
    case Stage::kPing:
      return 4;
    case Stage::kInitAdd:
    case Stage::kBarrierAdd:
    case Stage::kBarrierCount:
      return 8;
    case Stage::kPollWait:
    case Stage::kPeerWait:
    case Stage::kBarrierWait:
      return 1;
    case Stage::kPollGet:
    case Stage::kPeerGet:
      return in_.size() < 8 ? 0 : 8 + wire::get_u64(in_.data());
    case Stage::kPollSleep:
    case Stage::kDone:
      break;
  }
  return 0;
}

ScriptStep RankScript::received(std::string_view bytes) {
  if (stage_ == Stage::kPollSleep || stage_ == Stage::kDone) {
    fail("the server sent " + std::to_string(bytes.size()) + " bytes nobody asked for");
  }
  in_.append(bytes);
  ScriptStep step;
  for (;;) {
    const size_t size = reply_size();
    if (size == 0 || in_.size() < size) break;
    const std::string reply = in_.substr(0, size);
    in_.erase(0, size);
    advance(reply, step);
    if (stage_ == Stage::kPollSleep || stage_ == Stage::kDone) break;
  }
  if (!in_.empty() && (stage_ == Stage::kPollSleep || stage_ == Stage::kDone)) {
    fail("the server sent " + std::to_string(in_.size()) + " bytes nobody asked for");
  }
  return step;
}

std::string RankScript::resume() {
  stage_ = Stage::kPollWait;
  return poll_frame();
}

void RankScript::advance(std::string_view reply, ScriptStep& step) {
  switch (stage_) {
    case Stage::kPing:
      if (wire::get_u32(reply.data()) != ping_nonce(rank_)) fail("PING echoed another nonce");
      phase_ = InitPhase::kInit;
      stage_ = Stage::kInitAdd;
      step.send += add(kInitKey, 1);
      return;
    case Stage::kInitAdd:
      if (rank_ == 0) {
        stage_ = Stage::kPollWait;
        step.send += poll_frame();
      } else {
        step.send += exchange_start();
      }
      return;
    case Stage::kPollWait:
      if (static_cast<uint8_t>(reply[0]) != wire::kWaitStopWaiting) fail("WAIT init/ refused");
      stage_ = Stage::kPollGet;
      step.send += frame(Command::kGet, {std::string(kInitKey)});
      return;
    case Stage::kPollGet: {
      const std::string_view value = reply.substr(8);
      int64_t count = 0;
      std::from_chars(value.data(), value.data() + value.size(), count);
      if (count >= pattern_->ranks) {
        step.send += exchange_start();
      } else {
        stage_ = Stage::kPollSleep;
        step.poll_later = true;
      }
      return;
    }
    case Stage::kPeerWait:
      if (static_cast<uint8_t>(reply[0]) != wire::kWaitStopWaiting) fail("WAIT addr refused");
      stage_ = Stage::kPeerGet;
      step.send += frame(Command::kGet, {peer_key(peer_)});
      return;
    case Stage::kPeerGet:
      if (reply.size() != 8 + pattern_->value_bytes) {
        fail("GET " + peer_key(peer_) + " returned " + std::to_string(reply.size() - 8) +
             " bytes, expected " + std::to_string(pattern_->value_bytes));
      }
      if (++peer_ < pattern_->peers) {
        stage_ = Stage::kPeerWait;
        step.send += peer_wait();
        return;
      }
      phase_ = InitPhase::kBarrier;
      stage_ = Stage::kBarrierAdd;
      step.send += add(kBarrierKey, 1);
      return;
    case Stage::kBarrierAdd:
      stage_ = Stage::kBarrierCount;
      step.send += add(kBarrierKey, 0);
      return;
    case Stage::kBarrierCount:
      if (static_cast<int64_t>(wire::get_u64(reply.data())) == pattern_->ranks) {
        step.send += frame(Command::kSet, {std::string(kLastWorkerKey)}, {"1"});
      }
      stage_ = Stage::kBarrierWait;
      step.send += frame(Command::kWait, {std::string(kLastWorkerKey)});
      return;
    case Stage::kBarrierWait:
      if (static_cast<uint8_t>(reply[0]) != wire::kWaitStopWaiting) fail("WAIT barrier refused");
      phase_ = InitPhase::kDone;
      stage_ = Stage::kDone;
      return;
    case Stage::kPollSleep:
    case Stage::kDone:
      break;
  }
}

std::string RankScript::exchange_start() {
  phase_ = InitPhase::kExchange;
  stage_ = Stage::kPeerWait;
  peer_ = 0;
  return frame(Command::kSet, {peer_key(-1)}, {std::string(pattern_->value_bytes, 'a')}) +
         peer_wait();
}

std::string RankScript::peer_wait() const {
  return frame(Command::kWait, {peer_key(peer_)});
}

// i = -1: this rank's own key; 0: rank 0's; i > 0: the i-th rank after this one.
std::string RankScript::peer_key(int i) const {
  const int rank = i < 0 ? rank_ : i == 0 ? 0 : (rank_ + i) % pattern_->ranks;
  return "addr/" + std::to_string(rank);
}

std::string RankScript::poll_frame() const {
  return frame(Command::kWait, {std::string(kInitKey)});
}

void RankScript::fail(const std::string& what) const {
  throw StoreError("init_bench: rank " + std::to_string(rank_) + ": " + what);
}

}  // namespace ddp::bench
