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

kernel void k0(device float* b0 [[buffer(0)]], device const float* b1 [[buffer(1)]], constant long& s0 [[buffer(2)]], uint3 tid [[thread_position_in_grid]], uint3 ltid [[thread_position_in_threadgroup]], uint3 tgid [[threadgroup_position_in_grid]]) {
  const long lid = (long)ltid.x;
  const long grp = (long)tgid.x;
  const long gid = grp * 4l + lid;
  threadgroup float red3[4];
    float acc1 = 0.0f;
    for (long r2 = lid; r2 < s0; r2 += 4) {
      const long v0 = (grp * s0);
      const long v1 = (v0 + r2);
      const float v2 = b1[v1];
      const float v3 = metal::precise::exp(v2);
      const float v4 = (acc1 + v3);
      acc1 = v4;
    }
    red3[lid] = acc1;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const int v5 = (lid < 2l);
    if (v5) {
      const float v6 = red3[lid];
      const long v7 = (lid + 2l);
      const float v8 = red3[v7];
      const float v9 = (v6 + v8);
      red3[lid] = v9;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const int v10 = (lid < 1l);
    if (v10) {
      const float v11 = red3[lid];
      const long v12 = (lid + 1l);
      const float v13 = red3[v12];
      const float v14 = (v11 + v13);
      red3[lid] = v14;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const float v15 = red3[0l];
    float tot4 = v15;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const int v16 = (lid == 0l);
    if (v16) {
      b0[grp] = tot4;
    }
}
