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

kernel void k0(device float* b0 [[buffer(0)]], device const long* b1 [[buffer(1)]], device const float* b2 [[buffer(2)]], device long* tw_err [[buffer(3)]], constant long& s0 [[buffer(4)]], uint3 tid [[thread_position_in_grid]]) {
  const long gid = (long)tid.x;
  if (gid >= s0) return;
    const long v0 = b1[gid];
    const int v1 = (v0 < 0l);
    const int v2 = (v0 >= 4l);
    const int v3 = (v1 | v2);
    if (v3) {
      { tw_err[0] = 1; tw_err[1] = (long)v0; }
    }
    const long v4 = (gid / 2l);
    const long v5 = (v4 * 4l);
    const long v6 = (v3 ? 0l : v0);
    const long v7 = (v5 + v6);
    const float v8 = b2[v7];
    b0[gid] = v8;
}
