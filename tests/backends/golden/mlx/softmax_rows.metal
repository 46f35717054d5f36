// kernel k0: grid 1536, threadgroup 256
// inputs: b1
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
  threadgroup float red3[256];
    float acc1 = (-INFINITY);
    for (long r2 = lid; r2 < 300l; r2 += 256) {
      const long v0 = (grp * 300l);
      const long v1 = (v0 + r2);
      const float v2 = b1[v1];
      const int v3 = (isnan(v2) != 0);
      const int v4 = (v2 > acc1);
      const int v5 = (v3 | v4);
      const float v6 = (v5 ? v2 : acc1);
      acc1 = v6;
    }
    red3[lid] = acc1;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const int v7 = (lid < 128l);
    if (v7) {
      const long v8 = (lid + 128l);
      const float v9 = red3[v8];
      const int v10 = (isnan(v9) != 0);
      const float v11 = red3[lid];
      const int v12 = (v9 > v11);
      const int v13 = (v10 | v12);
      const float v14 = (v13 ? v9 : v11);
      red3[lid] = v14;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const int v15 = (lid < 64l);
    if (v15) {
      const long v16 = (lid + 64l);
      const float v17 = red3[v16];
      const int v18 = (isnan(v17) != 0);
      const float v19 = red3[lid];
      const int v20 = (v17 > v19);
      const int v21 = (v18 | v20);
      const float v22 = (v21 ? v17 : v19);
      red3[lid] = v22;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const int v23 = (lid < 32l);
    if (v23) {
      const long v24 = (lid + 32l);
      const float v25 = red3[v24];
      const int v26 = (isnan(v25) != 0);
      const float v27 = red3[lid];
      const int v28 = (v25 > v27);
      const int v29 = (v26 | v28);
      const float v30 = (v29 ? v25 : v27);
      red3[lid] = v30;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const int v31 = (lid < 16l);
    if (v31) {
      const long v32 = (lid + 16l);
      const float v33 = red3[v32];
      const int v34 = (isnan(v33) != 0);
      const float v35 = red3[lid];
      const int v36 = (v33 > v35);
      const int v37 = (v34 | v36);
      const float v38 = (v37 ? v33 : v35);
      red3[lid] = v38;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const int v39 = (lid < 8l);
    if (v39) {
      const long v40 = (lid + 8l);
      const float v41 = red3[v40];
      const int v42 = (isnan(v41) != 0);
      const float v43 = red3[lid];
      const int v44 = (v41 > v43);
      const int v45 = (v42 | v44);
      const float v46 = (v45 ? v41 : v43);
      red3[lid] = v46;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const int v47 = (lid < 4l);
    if (v47) {
      const long v48 = (lid + 4l);
      const float v49 = red3[v48];
      const int v50 = (isnan(v49) != 0);
      const float v51 = red3[lid];
      const int v52 = (v49 > v51);
      const int v53 = (v50 | v52);
      const float v54 = (v53 ? v49 : v51);
      red3[lid] = v54;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const int v55 = (lid < 2l);
    if (v55) {
      const long v56 = (lid + 2l);
      const float v57 = red3[v56];
      const int v58 = (isnan(v57) != 0);
      const float v59 = red3[lid];
      const int v60 = (v57 > v59);
      const int v61 = (v58 | v60);
      const float v62 = (v61 ? v57 : v59);
      red3[lid] = v62;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const int v63 = (lid < 1l);
    if (v63) {
      const long v64 = (lid + 1l);
      const float v65 = red3[v64];
      const int v66 = (isnan(v65) != 0);
      const float v67 = red3[lid];
      const int v68 = (v65 > v67);
      const int v69 = (v66 | v68);
      const float v70 = (v69 ? v65 : v67);
      red3[lid] = v70;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const float v71 = red3[0l];
    float tot4 = v71;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const int v72 = (lid == 0l);
    if (v72) {
      b0[grp] = tot4;
    }
// kernel k1: grid 1800, threadgroup any
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
  const long gid = (long)thread_position_in_grid.x;
  if (gid >= 1800l) return;
    const float v0 = b1[gid];
    const long v1 = (gid / 300l);
    const float v2 = b2[v1];
    const float v3 = (v0 - v2);
    const float v4 = metal::precise::exp(v3);
    b0[gid] = v4;
// kernel k2: grid 1536, threadgroup 256
// inputs: b1
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
  threadgroup float red3[256];
    float acc1 = 0.0f;
    for (long r2 = lid; r2 < 300l; r2 += 256) {
      const long v0 = (grp * 300l);
      const long v1 = (v0 + r2);
      const float v2 = b1[v1];
      const float v3 = (acc1 + v2);
      acc1 = v3;
    }
    red3[lid] = acc1;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const int v4 = (lid < 128l);
    if (v4) {
      const float v5 = red3[lid];
      const long v6 = (lid + 128l);
      const float v7 = red3[v6];
      const float v8 = (v5 + v7);
      red3[lid] = v8;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const int v9 = (lid < 64l);
    if (v9) {
      const float v10 = red3[lid];
      const long v11 = (lid + 64l);
      const float v12 = red3[v11];
      const float v13 = (v10 + v12);
      red3[lid] = v13;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const int v14 = (lid < 32l);
    if (v14) {
      const float v15 = red3[lid];
      const long v16 = (lid + 32l);
      const float v17 = red3[v16];
      const float v18 = (v15 + v17);
      red3[lid] = v18;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const int v19 = (lid < 16l);
    if (v19) {
      const float v20 = red3[lid];
      const long v21 = (lid + 16l);
      const float v22 = red3[v21];
      const float v23 = (v20 + v22);
      red3[lid] = v23;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const int v24 = (lid < 8l);
    if (v24) {
      const float v25 = red3[lid];
      const long v26 = (lid + 8l);
      const float v27 = red3[v26];
      const float v28 = (v25 + v27);
      red3[lid] = v28;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const int v29 = (lid < 4l);
    if (v29) {
      const float v30 = red3[lid];
      const long v31 = (lid + 4l);
      const float v32 = red3[v31];
      const float v33 = (v30 + v32);
      red3[lid] = v33;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const int v34 = (lid < 2l);
    if (v34) {
      const float v35 = red3[lid];
      const long v36 = (lid + 2l);
      const float v37 = red3[v36];
      const float v38 = (v35 + v37);
      red3[lid] = v38;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const int v39 = (lid < 1l);
    if (v39) {
      const float v40 = red3[lid];
      const long v41 = (lid + 1l);
      const float v42 = red3[v41];
      const float v43 = (v40 + v42);
      red3[lid] = v43;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const float v44 = red3[0l];
    float tot4 = v44;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const int v45 = (lid == 0l);
    if (v45) {
      b0[grp] = tot4;
    }
// kernel k3: grid 1800, threadgroup any
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
  const long gid = (long)thread_position_in_grid.x;
  if (gid >= 1800l) return;
    const float v0 = b1[gid];
    const long v1 = (gid / 300l);
    const float v2 = b2[v1];
    const float v3 = (v0 / v2);
    b0[gid] = v3;
