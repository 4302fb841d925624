//===- Kernels.h - Every kernel of the CPU reference backend ----*- C++ -*-===//
//
// The CPU backend's ops, forward and backward, as plain functions on fp32
// buffers. Conventions (layouts, accumulation, determinism, errors) are in
// Common.h; each family's header states its exact formulas.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CPU_KERNELS_H
#define KILN_RUNTIME_CPU_KERNELS_H

#include "kiln/Runtime/Cpu/Attention.h"
#include "kiln/Runtime/Cpu/Bf16.h"
#include "kiln/Runtime/Cpu/Common.h"
#include "kiln/Runtime/Cpu/Elementwise.h"
#include "kiln/Runtime/Cpu/Embedding.h"
#include "kiln/Runtime/Cpu/Fp8.h"
#include "kiln/Runtime/Cpu/Linear.h"
#include "kiln/Runtime/Cpu/Loss.h"
#include "kiln/Runtime/Cpu/Norm.h"
#include "kiln/Runtime/Cpu/Optim.h"
#include "kiln/Runtime/Cpu/Rope.h"

#endif // KILN_RUNTIME_CPU_KERNELS_H
