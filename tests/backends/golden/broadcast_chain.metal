#include <metal_stdlib>
using namespace metal;

#define TW_FN inline
#define TW_I64 long
#define TW_U64 ulong
#define TW_U64C(x) x##UL
#define TW_AS_UINT(x) as_type<uint>(x)
#define TW_AS_FLOAT(x) as_type<float>(x)
#define TW_CLZ64(x) clz(x)
#define TW_MULHI64(a, b) mulhi(a, b)

kernel void k0(device float* b0 [[buffer(0)]], device const float* b1 [[buffer(1)]], device const float* b2 [[buffer(2)]], constant long& s0 [[buffer(3)]], uint3 tid [[thread_position_in_grid]]) {
  const long gid = (long)tid.x;
  if (gid >= s0) return;
    const float v0 = b1[gid];
    const long v1 = (gid % 3l);
    const float v2 = b2[v1];
    const float v3 = (v0 * v2);
    const float v4 = metal::precise::exp(v3);
    const float v5 = (v4 + v0);
    b0[gid] = v5;
}
