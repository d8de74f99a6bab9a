#pragma once
// SIGPIPE into EPIPE: a write to a closed pipe or socket (a console closed by `| head`, a Gloo
// peer that aborted) must fail that write, not kill the process. A no-op handler rather than
// SIG_IGN, which programs this process execs would inherit; workers get the default back at
// exec. A disposition the program chose itself (SIG_IGN, a handler) is left alone.
namespace ddp {

void survive_sigpipe();

}  // namespace ddp
