#pragma once
// The end of a recorded decode step that the next step follows with nothing copied in the queue between them
// (Backend::hand_off_step, TextDecoder::queue_step): the step's pick into slot past mod slots of host memory the
// device writes, then the next step's inputs: the position advanced by one and its rotary rows taken from a ring the
// host fills ahead.
#include <cuda_runtime.h>

#include <cstdint>

namespace qvl::cuda {

struct StepHandoffArgs {
  const int64_t* pick;
  int64_t pick_count;
  int64_t* handed;       // [handed_slots, pick_count], host memory mapped for the device
  int64_t handed_slots;
  int64_t* past;         // the step's position, advanced by one
  const float* rotary;   // [rotary_rows, 2, head_dim]: each cache position's cos row, then its sin row
  int64_t rotary_rows;
  int64_t head_dim;
  float* cos;            // [head_dim] each, the next step's rows
  float* sin;
};

void step_handoff(const StepHandoffArgs& args, cudaStream_t stream);

}  // namespace qvl::cuda
