// SIGTERM / SIGINT during training: the handler only records the signal; the trainer checks it
// at the next optimizer-step boundary, saves a checkpoint and stops (a second signal while it
// saves is recorded too, and the save still completes: nothing is left half-written). From the
// signal on, output to a pipe or socket no longer blocks (stop_signal.cc says why).
#pragma once

namespace ftune {

class StopSignal {
 public:
  StopSignal();   // installs the handlers
  ~StopSignal();  // restores the previous ones
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;

  bool requested() const;
  int signal() const;  // the first signal received (0: none)
};

}  // namespace ftune
