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

kernel void k0(device float* b0 [[buffer(0)]], device const float* b1 [[buffer(1)]], device const float* b2 [[buffer(2)]], uint3 tid [[thread_position_in_grid]], uint3 ltid [[thread_position_in_threadgroup]], uint3 tgid [[threadgroup_position_in_grid]]) {
  const long lid = (long)ltid.x;
  const long grp = (long)tgid.x;
  const long gid = grp * 256l + lid;
  threadgroup float As1[256];
  threadgroup float Bs2[256];
    float acc3 = 0.0f;
    for (long k4 = 0l; k4 < 6l; k4 += 16) {
      const long v0 = (lid / 16l);
      const int v1 = (v0 < 5l);
      const long v2 = (lid % 16l);
      const long v3 = (k4 + v2);
      const int v4 = (v3 < 6l);
      const int v5 = (v1 & v4);
      const long v6 = (v0 < 4l ? v0 : 4l);
      const long v7 = (v6 * 6l);
      const long v8 = (v3 < 5l ? v3 : 5l);
      const long v9 = (v7 + v8);
      const float v10 = b1[v9];
      const float v11 = (v5 ? v10 : 0.0f);
      As1[lid] = v11;
      const long v12 = (k4 + v0);
      const int v13 = (v12 < 6l);
      const int v14 = (v2 < 3l);
      const int v15 = (v13 & v14);
      const long v16 = (v12 < 5l ? v12 : 5l);
      const long v17 = (v16 * 3l);
      const long v18 = (v2 < 2l ? v2 : 2l);
      const long v19 = (v17 + v18);
      const float v20 = b2[v19];
      const float v21 = (v15 ? v20 : 0.0f);
      Bs2[lid] = v21;
      threadgroup_barrier(mem_flags::mem_threadgroup);
      for (long kk5 = 0l; kk5 < 16l; kk5++) {
        const long v22 = (v0 * 16l);
        const long v23 = (v22 + kk5);
        const float v24 = As1[v23];
        const long v25 = (kk5 * 16l);
        const long v26 = (v25 + v2);
        const float v27 = Bs2[v26];
        const float v28 = (v24 * v27);
        const float v29 = (acc3 + v28);
        acc3 = v29;
      }
      threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    const long v30 = (lid / 16l);
    const int v31 = (v30 < 5l);
    const long v32 = (lid % 16l);
    const int v33 = (v32 < 3l);
    const int v34 = (v31 & v33);
    if (v34) {
      const long v35 = (v30 * 3l);
      const long v36 = (v35 + v32);
      b0[v36] = acc3;
    }
}
