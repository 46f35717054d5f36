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


TW_FN float tw_f16_to_f32(unsigned short h) {
  unsigned int sign = ((unsigned int)h & 0x8000u) << 16, e = ((unsigned int)h >> 10) & 0x1fu;
  unsigned int m = (unsigned int)h & 0x3ffu;
  if (e == 0u) { float f = (float)m * 5.9604644775390625e-8f; return sign ? -f : f; }
  if (e == 31u) return TW_AS_FLOAT(sign | 0x7f800000u | (m << 13));
  return TW_AS_FLOAT(sign | ((e + 112u) << 23) | (m << 13));
}
TW_FN unsigned short tw_f32_to_f16(float f) {
  unsigned int x = TW_AS_UINT(f), sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) {
    if (ax == 0x7f800000u) return (unsigned short)(sign | 0x7c00u);
    unsigned int r = 0x7c00u + ((ax & 0x7fffffu) >> 13);
    return (unsigned short)(sign | (r == 0x7c00u ? 0x7c01u : r));
  }
  if (ax >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);
  if (ax < 0x38800000u) {  /* subnormal: round |f| * 2**24 to an integer, to nearest even */
    float s = TW_AS_FLOAT(ax) * 16777216.0f;
    s = (s + 12582912.0f) - 12582912.0f;
    return (unsigned short)(sign | (unsigned int)s);
  }
  ax += 0xfffu + ((ax >> 13) & 1u);
  return (unsigned short)(sign | ((ax - 0x38000000u) >> 13));
}
TW_FN float tw_bf16_to_f32(unsigned short h) { return TW_AS_FLOAT(((unsigned int)h) << 16); }
TW_FN unsigned short tw_f32_to_bf16(float f) {
  unsigned int x = TW_AS_UINT(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((x >> 16) | 0x40u);
  return (unsigned short)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
TW_FN float tw_rnd_f16(float f) { return tw_f16_to_f32(tw_f32_to_f16(f)); }
TW_FN float tw_rnd_bf16(float f) { return tw_bf16_to_f32(tw_f32_to_bf16(f)); }

kernel void k0(device ushort* b0 [[buffer(0)]], device const float* b1 [[buffer(1)]], constant long& s0 [[buffer(2)]], uint3 tid [[thread_position_in_grid]]) {
  const long gid = (long)tid.x;
  if (gid >= s0) return;
    const float v0 = b1[gid];
    const float v1 = tw_rnd_f16(v0);
    const float v2 = tw_rnd_f16((v1 * v1));
    b0[gid] = tw_f32_to_f16(v2);
}
