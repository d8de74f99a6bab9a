#include "launcher/hang/progress_board.hpp"

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>

namespace ddp::launcher {

namespace {

int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string key(uint64_t round, int group_rank) {
  return "hang/" + std::to_string(round) + "/" + std::to_string(group_rank);
}

// After a connection failed, how long before the next attempt to open one: a store that is
// down is not dialled at every write.
constexpr std::chrono::milliseconds kReconnectAfter{1000};

nlohmann::json ranks_json(const std::vector<RankSnapshot>& ranks, int64_t now_ms) {
  auto out = nlohmann::json::array();
  for (const auto& r : ranks) {
    out.push_back({{"rank", r.rank},
                   {"source", r.has_source},
                   // To 100 ms: the same progress gives the same text check after check.
                   {"moved_ms", (now_ms - static_cast<int64_t>(r.silent_s * 1000)) / 100 * 100},
                   {"state", std::string(r.state == 0 ? "" : std::string(1, r.state))},
                   {"hung", r.hung},
                   {"step", r.last.step},
                   {"op", r.last.op},
                   {"seq", r.last.seq},
                   {"phase", progress::phase_name(r.last.phase)}});
  }
  return out;
}

std::string encode(const nlohmann::json& ranks, int64_t now_ms) {
  return nlohmann::json{{"written_ms", now_ms}, {"ranks", ranks}}.dump();
}

}  // namespace

std::string encode_snapshots(const std::vector<RankSnapshot>& ranks, int64_t now_ms) {
  return encode(ranks_json(ranks, now_ms), now_ms);
}

std::vector<RankSnapshot> decode_snapshots(const std::string& text, int64_t now_ms) {
  std::vector<RankSnapshot> out;
  auto json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  // {"written_ms": ..., "ranks": [...]}; a bare array is a view without its time.
  double unheard_s = 0;
  if (json.is_object()) {
    const auto written = json.find("written_ms");
    if (written != json.end() && written->is_number_integer()) {
      unheard_s = std::max(0.0, static_cast<double>(now_ms - written->get<int64_t>()) / 1000.0);
    }
    auto ranks = json.find("ranks");
    json = ranks == json.end() ? nlohmann::json() : *ranks;
  }
  if (!json.is_array()) return out;
  for (const auto& item : json) {
    try {
      RankSnapshot r;
      r.rank = item.at("rank").get<int>();
      r.has_source = item.at("source").get<bool>();
      r.silent_s = static_cast<double>(now_ms - item.at("moved_ms").get<int64_t>()) / 1000.0;
      const auto state = item.at("state").get<std::string>();
      r.state = state.empty() ? char{0} : state[0];
      r.hung = item.at("hung").get<bool>();
      r.last.rank = r.rank;
      r.last.step = item.at("step").get<int64_t>();
      r.last.op = item.at("op").get<std::string>();
      r.last.seq = item.at("seq").get<int64_t>();
      const auto phase = item.at("phase").get<std::string>();
      r.last.phase = phase == "enter"  ? progress::Phase::kEnter
                     : phase == "exit" ? progress::Phase::kExit
                                       : progress::Phase::kNone;
      r.unheard_s = unheard_s;
      out.push_back(std::move(r));
    } catch (const nlohmann::json::exception&) {
      // Another node's entry this version cannot read: leave that rank out.
    }
  }
  return out;
}

ProgressBoard::ProgressBoard(Connector connect, std::chrono::milliseconds refresh)
    : connect_(std::move(connect)), refresh_(refresh) {
  if (connect_) thread_ = std::thread([this] { run(); });
}

rendezvous::Store* ProgressBoard::store() {
  if (store_ || alone_) return store_.get();
  const auto now = std::chrono::steady_clock::now();
  if (last_connect_ && now - *last_connect_ < kReconnectAfter) return nullptr;
  last_connect_ = now;
  try {
    store_ = connect_();
    // A dead store must not hold the board (and whoever destroys it) for long.
    if (store_) store_->set_timeout(std::chrono::seconds(5));
    alone_ = !store_;
  } catch (const std::exception&) {
    store_ = nullptr;  // analysis falls back to this node's ranks; tried again later
  }
  return store_.get();
}

void ProgressBoard::drop_store() {
  // A store call failed: the connection may be broken for good (the store's host was paused
  // past the peer tolerance, a cut closed it), so the next write opens a fresh one. Kept, the
  // broken one would leave this node unheard by every other node for the rest of the round.
  store_.reset();
}

ProgressBoard::~ProgressBoard() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ProgressBoard::begin_round(uint64_t round, int group_rank, int group_world_size) {
  std::lock_guard<std::mutex> lock(mu_);
  round_ = round;
  group_rank_ = group_rank;
  group_world_size_ = group_world_size;
  pending_.reset();
  last_written_.clear();
}

void ProgressBoard::publish(std::vector<RankSnapshot> local) {
  if (!connect_) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_ = std::move(local);
  }
  cv_.notify_all();
}

void ProgressBoard::collect(std::vector<RankSnapshot> local, std::function<void(BoardView)> done) {
  if (!connect_) {
    done(BoardView{std::move(local), true});
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    collects_.emplace_back(std::move(local), std::move(done));
  }
  cv_.notify_all();
}

void ProgressBoard::run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return stop_ || pending_ || !collects_.empty(); });
    if (stop_) return;
    const uint64_t round = round_;
    const int group_rank = group_rank_;
    const int nodes = group_world_size_;
    if (pending_) {
      auto local = std::move(*pending_);
      pending_.reset();
      // moved_ms is what changes while ranks progress; the ranks are compared as written, and
      // an unchanged view is written again once refresh_ has passed (the node's heartbeat).
      const int64_t now = wall_ms();
      const auto ranks = ranks_json(local, now);
      auto ranks_text = ranks.dump();
      if (ranks_text == last_written_ && now - last_write_ms_ < refresh_.count()) continue;
      last_written_ = std::move(ranks_text);
      last_write_ms_ = now;
      const std::string text = encode(ranks, now);
      lock.unlock();
      try {
        if (auto* s = store()) s->set(key(round, group_rank), text);
      } catch (const std::exception&) {
        // The store is gone: the rendezvous reports that; hang analysis falls back to local.
        drop_store();
      }
      lock.lock();
      continue;
    }
    auto [local, done] = std::move(collects_.front());
    collects_.erase(collects_.begin());
    lock.unlock();
    BoardView view{local, true};
    try {
      auto* s = store();
      // No connection (the last one failed, and the next is not due yet): unanswered too.
      if (s == nullptr && !alone_) view.store_answered = false;
      if (s != nullptr) s->set(key(round, group_rank), encode_snapshots(local, wall_ms()));
      for (int node = 0; s != nullptr && node < nodes; ++node) {
        if (node == group_rank) continue;
        if (auto text = rendezvous::read_if_present(*s, key(round, node))) {
          auto theirs = decode_snapshots(*text, wall_ms());
          view.ranks.insert(view.ranks.end(), theirs.begin(), theirs.end());
        }
      }
    } catch (const std::exception&) {
      // Analyse what we have: this node's ranks.
      view = BoardView{local, false};
      drop_store();
    }
    done(std::move(view));
    lock.lock();
  }
}

}  // namespace ddp::launcher
