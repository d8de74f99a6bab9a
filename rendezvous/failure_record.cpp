#include "rendezvous/failure_record.hpp"

#include <chrono>
#include <nlohmann/json.hpp>

#include "common/error.hpp"

namespace ddp::rendezvous {
namespace {

// A traceback in the store is for the summary: its end says the most.
constexpr size_t kMaxTracebackBytes = size_t{8} * 1024;

// Waits up to timeout for the acknowledgements of attempt's record by readers (group ranks).
// A node that does not answer (gone, or its watch ended) is not waited for longer.
void wait_for_acks(Store& store, uint64_t attempt, const std::vector<int>& readers,
                   Duration timeout) {
  if (readers.empty()) return;
  std::vector<std::string> acks;
  acks.reserve(readers.size());
  for (const int g : readers) acks.push_back(store_leaving_ack_key(attempt, g));
  try {
    store.wait(acks, timeout);
  } catch (const StoreTimeout&) {
  }
}

}  // namespace

int FailureRecord::shell_status() const {
  if (kind == "node_lost") return 1;
  return signal != 0 ? 128 + signal : exit_code;
}

std::string FailureRecord::describe() const {
  std::string who;
  if (rank >= 0) {
    who = "rank " + std::to_string(rank) + " (local_rank " + std::to_string(local_rank) + ", pid " +
          std::to_string(pid) + ") on ";
  }
  who += "node " + std::to_string(group_rank) + (host.empty() ? "" : " (" + host + ")");
  std::string what;
  if (kind == "node_lost") {
    what = "lost: " + message;
  } else if (kind == "store_leaving") {
    what = "hosts the store and leaves: " + message;
  } else if (kind == "agent_signal") {
    what = "its agent received signal " + std::to_string(signal) +
           (message.empty() ? "" : " (" + message + ")");
  } else {
    what =
        signal != 0 ? "signal " + std::to_string(signal) : "exit code " + std::to_string(exit_code);
    if (!message.empty()) what += ": " + message;
  }
  return who + ": " + what;
}

std::string failure_key(uint64_t attempt) {
  return "failure/" + std::to_string(attempt);
}

std::string encode_failure(const FailureRecord& r) {
  std::string traceback = r.traceback;
  if (traceback.size() > kMaxTracebackBytes) {
    traceback = "...\n" + traceback.substr(traceback.size() - kMaxTracebackBytes);
  }
  const nlohmann::json doc = {
      {"kind", r.kind},  {"attempt", r.attempt},     {"group_rank", r.group_rank},
      {"host", r.host},  {"rank", r.rank},           {"local_rank", r.local_rank},
      {"pid", r.pid},    {"exit_code", r.exit_code}, {"signal", r.signal},
      {"time", r.time},  {"message", r.message},     {"traceback", traceback},
      {"final", r.final}};
  return doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

FailureRecord decode_failure(const std::string& text) {
  const auto doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  const auto shown = text.size() > 200 ? text.substr(0, 200) + "..." : text;
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("kind") || !doc["kind"].is_string()) {
    throw ProtocolError("failure record '" + shown +
                        "': expected a JSON object with a string 'kind'");
  }
  FailureRecord r;
  try {
    r.kind = doc.at("kind").get<std::string>();
    r.attempt = doc.value("attempt", uint64_t{0});
    r.group_rank = doc.value("group_rank", -1);
    r.host = doc.value("host", std::string());
    r.rank = doc.value("rank", -1);
    r.local_rank = doc.value("local_rank", -1);
    r.pid = doc.value("pid", 0);
    r.exit_code = doc.value("exit_code", 0);
    r.signal = doc.value("signal", 0);
    r.time = doc.value("time", 0.0);
    r.message = doc.value("message", std::string());
    r.traceback = doc.value("traceback", std::string());
    r.final = doc.value("final", false);
  } catch (const nlohmann::json::exception& e) {
    throw ProtocolError("failure record '" + shown + "': " + e.what());
  }
  return r;
}

FailureRecord publish_failure(Store& store, const FailureRecord& record) {
  const std::string mine = encode_failure(record);
  const std::string held = store.compare_set(failure_key(record.attempt), "", mine);
  return held == mine ? record : decode_failure(held);
}

std::string store_leaving_ack_key(uint64_t attempt, int group_rank) {
  return failure_key(attempt) + "/ack/" + std::to_string(group_rank);
}

void announce_store_leaving(Store& store, uint64_t attempt, int group_rank, const std::string& host,
                            const std::vector<int>& still_running, Duration ack_timeout) {
  FailureRecord r;
  r.kind = "store_leaving";
  r.attempt = attempt;
  r.group_rank = group_rank;
  r.host = host;
  r.time = unix_now();
  r.message = "its workers finished and its exit barrier ended";
  const std::string mine = encode_failure(r);
  if (store.compare_set(failure_key(attempt), "", mine) != mine) return;  // a failure holds
  wait_for_acks(store, attempt, still_running, ack_timeout);
}

void wait_for_failure_readers(const ExitBarrier& barrier, uint64_t attempt, int self,
                              const std::function<std::string(int)>& alive_key,
                              Duration ack_timeout) {
  Store& store = barrier.store;
  if (!read_if_present(store, failure_key(attempt))) return;
  std::vector<int> readers;
  for (int member = 0; member < barrier.nodes; ++member) {
    if (member == self || !barrier.out_reason(member).empty()) continue;
    if (!store.check({alive_key(member)})) continue;  // its agent is gone
    readers.push_back(member);
  }
  wait_for_acks(store, attempt, readers, ack_timeout);
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace ddp::rendezvous
