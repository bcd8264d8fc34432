/*
 * qdot_neon.h — ARM64 NEON bodies of the weight formats' dot products (qdot_neon.c; internal to
 * runtime/kernels). Each is a ck_vec_dot_fn, a row of `type` against activations quantized to its dot type,
 * listed in qlinear.c's kCpu table beside its reference and x86 bodies. Off ARM64 the names are not defined
 * and CK_NEON is 0.
 */
#ifndef CK_QDOT_NEON_H
#define CK_QDOT_NEON_H

#include <stdint.h>

#include "ck_kernels.h" /* CK_NEON */

#ifdef __cplusplus
extern "C" {
#endif

int ck_qdot_neon_compiled(void); /* CK_NEON of the runtime as compiled */

#if CK_NEON
float ck_dot_neon_f32(int64_t n, const void *w, const void *a);
float ck_dot_neon_f16(int64_t n, const void *w, const void *a);
float ck_dot_neon_bf16(int64_t n, const void *w, const void *a);
float ck_dot_neon_q8_0(int64_t n, const void *w, const void *a);
float ck_dot_neon_q4_0(int64_t n, const void *w, const void *a);
float ck_dot_neon_q4_1(int64_t n, const void *w, const void *a);
float ck_dot_neon_q4_K(int64_t n, const void *w, const void *a);
float ck_dot_neon_q5_K(int64_t n, const void *w, const void *a);
float ck_dot_neon_q6_K(int64_t n, const void *w, const void *a);
#endif

#ifdef __cplusplus
}
#endif
#endif
