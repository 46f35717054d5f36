// kernel k0: grid 1536, threadgroup 256
// inputs: b1, b2
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
  const long lid = (long)thread_position_in_threadgroup.x;
  const long grp = (long)threadgroup_position_in_grid.x;
  const long gid = grp * 256l + lid;
  threadgroup float As1[256];
  threadgroup float Bs2[256];
    float acc3 = 0.0f;
    for (long k4 = 0l; k4 < 20l; k4 += 16) {
      const long v0 = (grp / 2l);
      const long v1 = (v0 * 16l);
      const long v2 = (lid / 16l);
      const long v3 = (v1 + v2);
      const int v4 = (v3 < 37l);
      const long v5 = (lid % 16l);
      const long v6 = (k4 + v5);
      const int v7 = (v6 < 20l);
      const int v8 = (v4 & v7);
      const long v9 = (v3 < 36l ? v3 : 36l);
      const long v10 = (v9 * 20l);
      const long v11 = (v6 < 19l ? v6 : 19l);
      const long v12 = (v10 + v11);
      const float v13 = b1[v12];
      const float v14 = (v8 ? v13 : 0.0f);
      As1[lid] = v14;
      const long v15 = (k4 + v2);
      const int v16 = (v15 < 20l);
      const long v17 = (grp % 2l);
      const long v18 = (v17 * 16l);
      const long v19 = (v18 + v5);
      const int v20 = (v19 < 19l);
      const int v21 = (v16 & v20);
      const long v22 = (v15 < 19l ? v15 : 19l);
      const long v23 = (v22 * 19l);
      const long v24 = (v19 < 18l ? v19 : 18l);
      const long v25 = (v23 + v24);
      const float v26 = b2[v25];
      const float v27 = (v21 ? v26 : 0.0f);
      Bs2[lid] = v27;
      threadgroup_barrier(mem_flags::mem_threadgroup);
      for (long kk5 = 0l; kk5 < 16l; kk5++) {
        const long v28 = (v2 * 16l);
        const long v29 = (v28 + kk5);
        const float v30 = As1[v29];
        const long v31 = (kk5 * 16l);
        const long v32 = (v31 + v5);
        const float v33 = Bs2[v32];
        const float v34 = (v30 * v33);
        const float v35 = (acc3 + v34);
        acc3 = v35;
      }
      threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    const long v36 = (grp / 2l);
    const long v37 = (v36 * 16l);
    const long v38 = (lid / 16l);
    const long v39 = (v37 + v38);
    const int v40 = (v39 < 37l);
    const long v41 = (grp % 2l);
    const long v42 = (v41 * 16l);
    const long v43 = (lid % 16l);
    const long v44 = (v42 + v43);
    const int v45 = (v44 < 19l);
    const int v46 = (v40 & v45);
    if (v46) {
      const long v47 = (v39 * 19l);
      const long v48 = (v47 + v44);
      b0[v48] = acc3;
    }
