// kernel k0: grid 7, threadgroup any
// inputs: s0, s1, s2
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


TW_FN TW_I64 tw_rng_bits(TW_I64 seed, TW_I64 counter) {
  TW_U64 z = ((TW_U64)seed + 1) * TW_U64C(0x9E3779B97F4A7C15) + (TW_U64)counter;
  z = (z ^ (z >> 30)) * TW_U64C(0xBF58476D1CE4E5B9);
  z = (z ^ (z >> 27)) * TW_U64C(0x94D049BB133111EB);
  return (TW_I64)(z ^ (z >> 31));
}
TW_FN float tw_rand_f32(TW_I64 w, TW_I64 p) {
  return (float)(((TW_U64)w) >> (64 - p)) * (1.0f / (float)((TW_I64)1 << p));
}
TW_FN TW_I64 tw_randint(TW_I64 seed, TW_I64 counter, TW_I64 low, TW_I64 high) {
  /* low + floor(u53 * float64(high - low)), u53 = (w >> 11) * 2**-53, in integers: the range and the product
     are rounded to 53 significant bits (to nearest, ties to even) where float64 rounds them */
  TW_U64 m = ((TW_U64)tw_rng_bits(seed, counter)) >> 11, r = (TW_U64)high - (TW_U64)low;
  int e = 0;
  if (r >> 53) {
    int s = 11 - (int)TW_CLZ64(r);
    TW_U64 rem = r & ((TW_U64C(1) << s) - 1), half = TW_U64C(1) << (s - 1);
    r >>= s;
    e = s;
    if (rem > half || (rem == half && (r & 1))) r += 1;
    if (r >> 53) { r >>= 1; e += 1; }
  }
  TW_U64 hi = TW_MULHI64(m, r), lo = m * r, pm = lo;
  int len = hi ? 128 - (int)TW_CLZ64(hi) : (lo ? 64 - (int)TW_CLZ64(lo) : 0);
  if (len > 53) {
    int s = len - 53;
    TW_U64 rem = lo & ((TW_U64C(1) << s) - 1), half = TW_U64C(1) << (s - 1);
    pm = (lo >> s) | (hi << (64 - s));
    if (rem > half || (rem == half && (pm & 1))) pm += 1;
    if (pm >> 53) { pm >>= 1; s += 1; }
    e += s;
  }
  e -= 53;
  TW_I64 v = (TW_I64)(e >= 0 ? pm << e : (e > -64 ? pm >> -e : 0)) + low;
  return v < high - 1 ? v : high - 1;
}

// -- body
  const long gid = (long)thread_position_in_grid.x;
  if (gid >= s2) return;
    const long v0 = (s1 + gid);
    const long v1 = tw_randint(s0, v0, (-4l), 9l);
    const int v2 = ((int)v1);
    b0[gid] = v2;
