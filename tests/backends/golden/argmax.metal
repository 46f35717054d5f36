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

kernel void k0(device long* b0 [[buffer(0)]], device const float* b1 [[buffer(1)]], constant long& s0 [[buffer(2)]], constant long& s1 [[buffer(3)]], uint3 tid [[thread_position_in_grid]]) {
  const long gid = (long)tid.x;
  if (gid >= s1) return;
    const long v0 = (gid * 5l);
    const float v1 = b1[v0];
    float best1 = v1;
    long bi2 = 0l;
    for (long k3 = 1l; k3 < s0; k3++) {
      const int v2 = (isnan(best1) != 0);
      const int v3 = (!v2);
      const long v4 = (v0 + k3);
      const float v5 = b1[v4];
      const int v6 = (v5 > best1);
      const int v7 = (isnan(v5) != 0);
      const int v8 = (v6 | v7);
      const int v9 = (v3 & v8);
      if (v9) {
        best1 = v5;
        bi2 = k3;
      }
    }
    b0[gid] = bi2;
}
