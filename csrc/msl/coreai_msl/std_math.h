// The standard math functions the headers call (std::exp, std::fmin,
// std::isnan ...): <cmath> on the CPU, nvptx_math.h's device functions on
// NVIDIA GPUs.
#pragma once

#if defined(__NVPTX__)
#include "nvptx_math.h"
#else
#include <cmath>
#endif
