// torchrun 2.x's options that 1.13 lacked: --signals_to_handle, --shutdown_timeout,
// --virtual_local_rank, --duplicate_*_filters, TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE, the
// refused --logs_specs and --event_log_handler; and no option is matched by an abbreviation.
#include <catch2/catch.hpp>
#include <csignal>

#include "common/error.hpp"
#include "launcher/config/cli.hpp"
#include "launcher/config/signal_list.hpp"

using namespace ddp::launcher;
using Catch::Matchers::Contains;
using namespace std::chrono_literals;

namespace {

const Environment kEnv = {{"PATH", "/usr/bin:/bin"}};

Environment with(Environment extra) {
  Environment env = kEnv;
  env.merge(extra);
  return env;
}

LaunchConfig parse(std::vector<std::string> args, const Environment& env = kEnv) {
  auto command_line = parse_command_line(args, env);
  REQUIRE(command_line.config.has_value());
  return *command_line.config;
}

std::string error_of(std::vector<std::string> args, const Environment& env = kEnv) {
  try {
    parse_command_line(args, env);
  } catch (const ddp::ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("signals_to_handle: default, both spellings, PET_, names checked", "[cli]") {
  CHECK(parse({"/bin/true"}).signals_to_handle ==
        std::vector<int>{SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2});
  CHECK(parse({"--signals_to_handle=SIGTERM,SIGUSR2", "/bin/true"}).signals_to_handle ==
        std::vector<int>{SIGTERM, SIGUSR2});
  CHECK(parse({"--signals-to-handle", " SIGINT , SIGINT,", "/bin/true"}).signals_to_handle ==
        std::vector<int>{SIGINT});
  CHECK(parse({"/bin/true"}, with({{"PET_SIGNALS_TO_HANDLE", "SIGHUP"}})).signals_to_handle ==
        std::vector<int>{SIGHUP});
  CHECK(parse({"--signals_to_handle", "", "/bin/true"}).signals_to_handle.empty());
  auto error = error_of({"--signals_to_handle=SIGTERM,SIGFOO,TERM,SIGKILL", "/bin/true"});
  CHECK_THAT(error, Contains("--signals_to_handle=SIGTERM,SIGFOO,TERM,SIGKILL"));
  CHECK_THAT(error, Contains("'SIGFOO', 'TERM', 'SIGKILL' cannot be handled"));
  CHECK_THAT(error, Contains("SIGUSR1"));
  CHECK(signal_list_names({SIGTERM, SIGUSR1}) == "SIGTERM,SIGUSR1");
}

TEST_CASE("shutdown_timeout is stop_timeout, TORCH_ELASTIC_SHUTDOWN_TIMEOUT its default", "[cli]") {
  CHECK(parse({"/bin/true"}).stop_timeout == 30s);
  CHECK(parse({"--shutdown_timeout=5", "/bin/true"}).stop_timeout == 5s);
  CHECK(parse({"--shutdown-timeout", "6", "/bin/true"}).stop_timeout == 6s);
  CHECK(parse({"/bin/true"}, with({{"PET_SHUTDOWN_TIMEOUT", "7"}})).stop_timeout == 7s);
  auto env = with({{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "120"}});
  CHECK(parse({"/bin/true"}, env).stop_timeout == 120s);
  CHECK(parse({"--stop_timeout=2", "/bin/true"}, env).stop_timeout == 2s);
  CHECK(parse({"/bin/true"},
              with({{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "120"}, {"PET_SHUTDOWN_TIMEOUT", "3"}}))
            .stop_timeout == 3s);
  CHECK_THAT(error_of({"/bin/true"}, with({{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "soon"}})),
             Contains("TORCH_ELASTIC_SHUTDOWN_TIMEOUT=soon: expected a non-negative whole number"));
  CHECK_THAT(error_of({"--shutdown_timeout=-1", "/bin/true"}),
             Contains("expected a non-negative number of seconds"));
}

TEST_CASE("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE is the prefix when no flag gives one", "[cli]") {
  auto env = with({{"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "<${rank}>"}});
  CHECK(parse({"/bin/true"}, env).log_line_prefix_template == "<${rank}>");
  CHECK(parse({"--log_line_prefix_template=[x]", "/bin/true"}, env).log_line_prefix_template ==
        "[x]");
  env["PET_LOG_LINE_PREFIX_TEMPLATE"] = "{pet}";
  CHECK(parse({"/bin/true"}, env).log_line_prefix_template == "{pet}");
  // As in torchrun, an empty variable is as good as unset; the flag '' prints lines bare.
  auto empty = with({{"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", ""}});
  CHECK(parse({"/bin/true"}, empty).log_line_prefix_template == "[${role_name}${local_rank}]:");
  CHECK(
      parse({"--log_line_prefix_template", "", "/bin/true"}, env).log_line_prefix_template.empty());
}

TEST_CASE("duplicate filters: comma-separated substrings, ,, for a comma", "[cli]") {
  auto config = parse({"--duplicate_stdout_filters=apple,orange", "--duplicate-stderr-filters",
                       "a,,b,,c,,", "/bin/true"});
  CHECK(config.duplicate_stdout_filters == std::vector<std::string>{"apple", "orange"});
  CHECK(config.duplicate_stderr_filters == std::vector<std::string>{"a,b,c,"});
  CHECK(parse({"--duplicate_stdout_filters=,x,", "/bin/true"}).duplicate_stdout_filters ==
        std::vector<std::string>{"x"});
  CHECK(parse({"/bin/true"}, with({{"PET_DUPLICATE_STDERR_FILTERS", "loss"}}))
            .duplicate_stderr_filters == std::vector<std::string>{"loss"});
  CHECK(parse({"/bin/true"}).duplicate_stdout_filters.empty());
}

TEST_CASE("virtual_local_rank: a flag, and every worker needs its own CUDA_VISIBLE_DEVICES entry",
          "[cli]") {
  CHECK_FALSE(parse({"/bin/true"}).virtual_local_rank);
  CHECK(parse({"--virtual_local_rank", "--nproc_per_node=2", "/bin/true"}).virtual_local_rank);
  CHECK(parse({"--virtual-local-rank", "/bin/true"}).virtual_local_rank);
  CHECK(parse({"/bin/true"}, with({{"PET_VIRTUAL_LOCAL_RANK", "1"}})).virtual_local_rank);
  CHECK(parse({"--virtual_local_rank", "--nproc_per_node=2", "/bin/true"},
              with({{"CUDA_VISIBLE_DEVICES", "3, 5"}}))
            .virtual_local_rank);
  auto error = error_of({"--virtual_local_rank", "--nproc_per_node=3", "/bin/true"},
                        with({{"CUDA_VISIBLE_DEVICES", "3,5"}}));
  CHECK_THAT(error, Contains("CUDA_VISIBLE_DEVICES='3,5' lists 2 device(s)"));
  CHECK_THAT(error, Contains("local rank 2"));
  CHECK(virtual_visible_device(with({{"CUDA_VISIBLE_DEVICES", "3, 5"}}), 1) == "5");
  CHECK(virtual_visible_device(kEnv, 4) == "4");
}

TEST_CASE("torchrun's plugin options: --logs_specs refused, --event_log_handler only null",
          "[cli]") {
  CHECK_THAT(error_of({"--logs_specs=mine", "/bin/true"}),
             Contains("--logs_specs=mine: ddplaunch loads no Python LogsSpecs plugins"));
  CHECK_THAT(error_of({"--logs-specs", "mine", "/bin/true"}), Contains("--logs_specs=mine"));
  parse({"--event_log_handler=null", "/bin/true"});
  CHECK_THAT(error_of({"--event-log-handler", "console", "/bin/true"}),
             Contains("--event_log_handler=console: only 'null' is accepted"));
}

TEST_CASE("an abbreviation of an option is an error naming it, not the option", "[cli]") {
  // argparse (torchrun) would take --nproc for --nproc_per_node (pytorch#120601).
  CHECK_THAT(error_of({"--nproc", "3", "/bin/true"}), Contains("unknown option '--nproc'"));
  CHECK_THAT(error_of({"--nproc=3", "/bin/true"}), Contains("--nproc"));
  CHECK_THAT(error_of({"--max_restart=1", "/bin/true"}), Contains("--max_restart"));
  CHECK_THAT(error_of({"--signals", "SIGTERM", "/bin/true"}), Contains("--signals"));
}

TEST_CASE("after the program, launcher-like arguments are the program's", "[cli]") {
  auto config = parse({"--nproc_per_node=1", "/bin/echo", "--signal", "--nproc", "3",
                       "--max_restarts", "--shutdown_timeout=1", "--"});
  CHECK(config.program == "/bin/echo");
  CHECK(config.program_args == std::vector<std::string>{"--signal", "--nproc", "3",
                                                        "--max_restarts", "--shutdown_timeout=1",
                                                        "--"});
  CHECK(config.max_restarts == 0);
  CHECK(config.stop_timeout == 30s);
  CHECK(config.signals_to_handle.size() == 6);
}

TEST_CASE("an empty value written --opt= is empty, as in argparse, not the next argument",
          "[cli]") {
  auto config = parse({"--log_line_prefix_template=", "--nproc_per_node", "2", "-r", "3",
                       "--signals_to_handle=", "/bin/echo", "--role=", "x"});
  CHECK(config.log_line_prefix_template.empty());
  CHECK(config.signals_to_handle.empty());
  CHECK(config.nproc_per_node == 2);
  CHECK(config.program == "/bin/echo");
  CHECK(config.program_args == std::vector<std::string>{"--role=", "x"});
  CHECK(config.role == "default");
  // An option's value that looks like `--x=` stays a value.
  CHECK(parse({"--role", "--x=", "/bin/true"}).role == "--x=");
  CHECK_THAT(error_of({"--nproc_per_node=", "/bin/true"}),
             Contains("--nproc_per_node=: expected a positive integer"));
  // A flag keeps CLI11's reading of --flag=.
  CHECK(parse({"--pass_local_rank_arg=", "/bin/true"}).program == "/bin/true");
}
