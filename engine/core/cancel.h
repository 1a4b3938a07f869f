#pragma once
// A request stopped by its caller (Esc, a client gone): the stop flag is checked between the units of work of every
// phase — images, vision blocks, decoder layers, decode steps — and, on the CPU, inside the long products (per block
// of 64 rows), so a stop during a long prefill ends it within one block's time, not the whole pass's.
#include <atomic>
#include <exception>

namespace qvl {

// Thrown where a check finds the flag set; the engine turns it into a result whose stop_reason is "cancelled". Work
// skipped after the flag was set leaves garbage in activations, never in a result: a check follows before any use.
struct Cancelled : std::exception {
  const char* what() const noexcept override { return "the request was stopped"; }
};

inline bool stop_requested(const std::atomic<bool>* flag) { return flag && flag->load(std::memory_order_relaxed); }
inline void stop_if_requested(const std::atomic<bool>* flag) {
  if (stop_requested(flag)) throw Cancelled();
}

}  // namespace qvl
