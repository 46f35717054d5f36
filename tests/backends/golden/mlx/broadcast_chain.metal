// kernel k0: grid 12, threadgroup any
// inputs: b1, b2, s0
// outputs: b0
// -- header
#define TW_FN inline
#define TW_I64 long
#define TW_U64 ulong
#define TW_U64C(x) x##UL
#define TW_AS_UINT(x) as_type<uint>(x)
#define TW_AS_FLOAT(x) as_type<float>(x)
#define TW_CLZ64(x) clz(x)
#define TW_MULHI64(a, b) mulhi(a, b)

// -- body
  const long gid = (long)thread_position_in_grid.x;
  if (gid >= s0) return;
    const float v0 = b1[gid];
    const long v1 = (gid % 3l);
    const float v2 = b2[v1];
    const float v3 = (v0 * v2);
    const float v4 = metal::precise::exp(v3);
    const float v5 = (v4 + v0);
    b0[gid] = v5;
