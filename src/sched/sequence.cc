#include "sched/sequence.h"

namespace pagoda {

std::string_view to_string(SequenceStatus status) {
  switch (status) {
    case SequenceStatus::kWaiting:
      return "waiting";
    case SequenceStatus::kRunning:
      return "running";
    case SequenceStatus::kPreempted:
      return "preempted";
    case SequenceStatus::kFinishedStopped:
      return "finished_stopped";
    case SequenceStatus::kFinishedLength:
      return "finished_length";
    case SequenceStatus::kFinishedAborted:
      return "finished_aborted";
    case SequenceStatus::kFinishedPrompt:
      return "finished_prompt";
  }
  return "unknown";
}

}  // namespace pagoda
