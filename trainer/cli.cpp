#include "trainer/cli.hpp"

#include <CLI/CLI.hpp>
#include <iostream>

#include "common/error.hpp"
#include "common/version.hpp"

namespace ddp::trainer {

std::optional<TrainOptions> parse_command_line(int argc, const char* const* argv) {
  TrainOptions o;
  CLI::App app{"train: data-parallel MLP classifier (run it under ddplaunch, or alone)"};
  app.option_defaults()->always_capture_default();
  app.set_version_flag("--version", std::string("train (ddplaunch) ") + kVersion,
                       "Print the version and exit");
  app.add_option("--data", o.data,
                 "CSV (.csv, .csv.gz) or .npy file, 'synthetic', or 'digits' (data/digits.csv.gz)");
  app.add_option("--label_column", o.label_column, "label column; negative counts from the end");
  app.add_option("--val_fraction", o.val_fraction, "fraction of rows held out for validation");
  app.add_option("--standardize", o.standardize, "scale features by the training split's mean/std");
  app.add_option("--synthetic_rows", o.synthetic_rows, "rows of --data synthetic");
  app.add_option("--synthetic_features", o.synthetic_features, "features of --data synthetic");
  app.add_option("--synthetic_classes", o.synthetic_classes, "classes of --data synthetic");
  app.add_option("--synthetic_separation", o.synthetic_separation,
                 "class-centre distance of --data synthetic, in noise units (higher: easier)");
  app.add_option("--hidden", o.hidden, "hidden layer sizes, e.g. 256,256")->delimiter(',');
  app.add_option("--epochs", o.epochs, "passes over the training split");
  app.add_option("--batch_size", o.batch_size, "samples per rank per step");
  app.add_option("--max_steps", o.max_steps, "stop after this many steps (0 = run all epochs)");
  app.add_option("--optimizer", o.optimizer.name, "adamw or sgd");
  app.add_option("--lr", o.lr, "peak learning rate");
  app.add_option("--momentum", o.optimizer.momentum, "SGD momentum");
  app.add_option("--weight_decay", o.optimizer.weight_decay, "SGD L2 / AdamW decoupled decay");
  app.add_option("--warmup_steps", o.warmup_steps, "linear warm-up steps before cosine decay");
  app.add_option("--min_lr_ratio", o.min_lr_ratio, "cosine floor as a fraction of --lr");
  app.add_option("--seed", o.seed, "seed of split, synthetic data, init and shuffling");
  app.add_option("--backend", o.backend, "auto, gloo or nccl (DDPLAUNCH_BACKEND overrides)");
  app.add_option("--bucket_cap_mb", o.bucket_cap_mb, "gradient bucket size for the all-reduce");
  app.add_option("--gloo_direct_max_mb", o.gloo_direct_max_mb,
                 "Gloo collectives up to this size use the runtime's direct mesh (0 = never)");
  app.add_option("--consistency_every", o.consistency_every,
                 "check parameters agree across ranks every N steps (0 = off)");
  app.add_option("--blas_threads", o.blas_threads, "OpenBLAS threads per worker");
  app.add_option("--log_every", o.log_every, "rank 0 prints a progress line every N steps");
  app.add_option("--metrics", o.metrics, "JSON-lines metrics file written by rank 0");
  app.add_option("--checkpoint_dir", o.checkpoint_dir, "checkpoint directory; resumes from it");
  app.add_option("--checkpoint_every", o.checkpoint_every,
                 "checkpoint every N steps (0 = only at epoch end)");
  app.add_option("--out", o.out, "final weights (safetensors)");
  // Test hooks: kept out of --help's main list but documented in docs/trainer.md.
  app.add_option("--fault_kill_at_step", o.fault_kill_at_step,
                 "TEST: SIGKILL one rank after this step on the first attempt")
      ->group("Testing");
  app.add_option("--fault_hang_at_step", o.fault_hang_at_step,
                 "TEST: one rank stops making progress (sleeps) after this step on the first "
                 "attempt")
      ->group("Testing");
  app.add_option("--fault_kill_node_at_step", o.fault_kill_node_at_step,
                 "TEST: one rank SIGKILLs its agent (parent) and itself after this step on the "
                 "first attempt (a lost node)")
      ->group("Testing");
  app.add_option("--fault_slow_step_ms", o.fault_slow_step_ms,
                 "TEST: every rank sleeps this long after each step (a job slow enough for "
                 "timing tests to act mid-epoch)")
      ->group("Testing");
  app.add_option("--fault_rank", o.fault_rank,
                 "TEST: rank killed by --fault_kill_at_step / --fault_kill_node_at_step or hung "
                 "by --fault_hang_at_step")
      ->group("Testing");
  app.add_option("--sample_log", o.sample_log,
                 "TEST: directory; each rank appends the indices of every step to "
                 "samples-<pid>.txt")
      ->group("Testing");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return std::nullopt;
  } catch (const CLI::CallForVersion& e) {
    std::cout << e.what() << '\n';
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    throw ConfigError(std::string("train: ") + e.what() + " (see train --help)");
  }
  validate(o);
  return o;
}

}  // namespace ddp::trainer
