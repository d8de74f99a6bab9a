// What a user sees of the workers' output: a tqdm-style bar ('\r', no newline)
// shows while it runs, and a slow reader loses nothing while the agent keeps reacting.
// Real ddplaunch runs in shell pipelines, outcomes written down.
#include <catch2/catch.hpp>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "tests/support/files.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"

using namespace ddp::test;
using Catch::Matchers::Contains;
using namespace std::chrono_literals;

namespace {

constexpr auto kGuard = 120s;
const std::string kDdplaunch = build_path("ddplaunch");

// Reads stdin and writes one JSON line per chunk: its arrival time and its bytes.
constexpr const char* kTimestampingReader = R"(import json, os, sys, time
with open(sys.argv[1], "w") as out:
    while True:
        chunk = os.read(0, 65536)
        if not chunk:
            break
        out.write(json.dumps({"t": time.time(), "text": chunk.decode(errors="replace")}) + "\n")
        out.flush()
)";

ProcessResult run_pipeline(const std::string& command, std::map<std::string, std::string> env) {
  ChildOptions options;
  options.argv = {"/bin/sh", "-c", command};
  options.env = std::move(env);
  options.merge_stderr = true;
  options.own_process_group = true;
  return run_process(options, kGuard);
}

}  // namespace

TEST_CASE("a '\\r' progress bar with --progress_bars raw is seen on the console while it runs",
          "[e2e][user_view]") {
  TempDir dir;
  // 20 updates, 0.1 s apart, each stamped with the time it was written; the newline at the end.
  auto bar = dir.write("bar.py", R"(import sys, time
for i in range(20):
    sys.stdout.write(f"\r{i * 5:3d}%|{'#' * i:<20}| written={time.time():.3f}")
    sys.stdout.flush()
    time.sleep(0.1)
sys.stdout.write("\n")
)");
  auto reader = dir.write("reader.py", kTimestampingReader);
  auto chunks = dir.file("chunks.jsonl");
  // raw: every redraw as written (the default thins a bar in a pipe: user_view_console).
  auto run = run_pipeline(kDdplaunch + " --standalone --progress_bars raw " + bar + " | python3 " +
                              reader + " " + chunks,
                          {});
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  // Expected: every update reaches the reader within half a second of being written (at 10
  // updates a second, long before the line ends), redrawn as "\r[default0]:..." so the
  // prefix stays on screen.
  std::istringstream lines(read_file(chunks));
  std::string all;
  int on_time = 0;
  double last_update_seen = 0;
  double end_seen = 0;
  std::regex stamp("(\\d+)%\\|[#]*\\s*\\| written=([0-9.]+)");
  for (std::string line; std::getline(lines, line);) {
    auto chunk = nlohmann::json::parse(line);
    const double arrived = chunk["t"].get<double>();
    const auto text = chunk["text"].get<std::string>();
    all += text;
    for (std::sregex_iterator it(text.begin(), text.end(), stamp), end; it != end; ++it) {
      const double written = std::stod((*it)[2].str());
      if (arrived - written < 0.5) ++on_time;
      last_update_seen = std::max(last_update_seen, arrived);
    }
    if (text.find('\n') != std::string::npos) end_seen = arrived;
  }
  INFO(all);
  CHECK(on_time >= 15);  // generous: a loaded machine may delay a few
  CHECK(end_seen - last_update_seen < 0.5);
  CHECK_THAT(all, Contains("[default0]:  0%|") && Contains("\r[default0]: 50%|##########"));
  CHECK(all.ends_with("\n"));
}

TEST_CASE("a reader that sleeps 3 s gets every line, in order, and the agent keeps reacting",
          "[e2e][user_view]") {
  TempDir dir;
  // Ranks 0-7 print 2000 lines of 200 bytes (3.2 MB: past the console's 2 MiB queue and the
  // pipe); rank 8 prints nothing and exits 1 s in, noting when.
  auto flood = dir.write("flood.py", R"(import os, sys, time
rank = int(os.environ["RANK"])
if rank == 8:
    time.sleep(1)
    with open(os.path.join(os.environ["OUT_DIR"], "exit_time"), "w") as f:
        f.write(repr(time.time()))
    sys.exit(0)
for i in range(2000):
    print(f"rank {rank} line {i} ".ljust(199, "x"))
)");
  auto events = dir.file("events.jsonl");
  auto out = dir.file("out.txt");
  auto run = run_pipeline(kDdplaunch + " --nproc_per_node=9 --standalone --events_file " + events +
                              " " + flood + " | (sleep 3; cat > " + out + ")",
                          {{"OUT_DIR", dir.path().string()}});
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  // Expected: all 16,000 lines, each rank's in order, and no drop notice.
  std::map<int, int> next;
  int total = 0;
  std::istringstream lines(read_file(out));
  std::regex line_re("\\[default(\\d)\\]:rank (\\d) line (\\d+) x+");
  bool in_order = true;
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    CHECK_THAT(line, !Contains("dropped"));
    if (!std::regex_match(line, m, line_re)) continue;
    const int rank = std::stoi(m[1].str());
    in_order = in_order && std::stoi(m[2].str()) == rank && std::stoi(m[3].str()) == next[rank];
    ++next[rank];
    ++total;
  }
  CHECK(total == 16000);
  CHECK(in_order);
  for (int rank = 0; rank < 8; ++rank) CHECK(next[rank] == 2000);
  // Expected: rank 8's exit, while the console was blocked, was seen within 100 ms.
  const double exited = std::stod(read_file(dir.path() / "exit_time"));
  std::istringstream event_lines(read_file(events));
  bool seen = false;
  for (std::string line; std::getline(event_lines, line);) {
    auto event = nlohmann::json::parse(line);
    if (event["event"] != "worker_exit" || event["local_rank"] != 8) continue;
    seen = true;
    CHECK(event["time"].get<double>() - exited < 0.1);
  }
  CHECK(seen);
}
