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

kernel void k0(device float* b0 [[buffer(0)]], device const float* b1 [[buffer(1)]], constant long& s0 [[buffer(2)]], constant long& s1 [[buffer(3)]], uint3 tid [[thread_position_in_grid]]) {
  const long gid = (long)tid.x;
  if (gid >= s1) return;
    float acc2 = 0.0f;
    for (long r1 = 0l; r1 < s0; r1++) {
      const long v0 = (gid * s0);
      const long v1 = (v0 + r1);
      const float v2 = b1[v1];
      const float v3 = (acc2 + v2);
      acc2 = v3;
    }
    b0[gid] = acc2;
}
