// kernel k0: grid 1536, threadgroup 256
// inputs: b1, s0
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
  threadgroup float red7[256];
    float acc1 = (-INFINITY);
    for (long r2 = lid; r2 < s0; r2 += 256) {
      const long v0 = (grp * s0);
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
    float acc5 = 0.0f;
    for (long r6 = lid; r6 < s0; r6 += 256) {
      const long v72 = (grp * s0);
      const long v73 = (v72 + r6);
      const float v74 = b1[v73];
      const float v75 = (v74 - tot4);
      const float v76 = metal::precise::exp(v75);
      const float v77 = (acc5 + v76);
      acc5 = v77;
    }
    red7[lid] = acc5;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (v7) {
      const float v78 = red7[lid];
      const long v79 = (lid + 128l);
      const float v80 = red7[v79];
      const float v81 = (v78 + v80);
      red7[lid] = v81;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (v15) {
      const float v82 = red7[lid];
      const long v83 = (lid + 64l);
      const float v84 = red7[v83];
      const float v85 = (v82 + v84);
      red7[lid] = v85;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (v23) {
      const float v86 = red7[lid];
      const long v87 = (lid + 32l);
      const float v88 = red7[v87];
      const float v89 = (v86 + v88);
      red7[lid] = v89;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (v31) {
      const float v90 = red7[lid];
      const long v91 = (lid + 16l);
      const float v92 = red7[v91];
      const float v93 = (v90 + v92);
      red7[lid] = v93;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (v39) {
      const float v94 = red7[lid];
      const long v95 = (lid + 8l);
      const float v96 = red7[v95];
      const float v97 = (v94 + v96);
      red7[lid] = v97;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (v47) {
      const float v98 = red7[lid];
      const long v99 = (lid + 4l);
      const float v100 = red7[v99];
      const float v101 = (v98 + v100);
      red7[lid] = v101;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (v55) {
      const float v102 = red7[lid];
      const long v103 = (lid + 2l);
      const float v104 = red7[v103];
      const float v105 = (v102 + v104);
      red7[lid] = v105;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (v63) {
      const float v106 = red7[lid];
      const long v107 = (lid + 1l);
      const float v108 = red7[v107];
      const float v109 = (v106 + v108);
      red7[lid] = v109;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const float v110 = red7[0l];
    float tot8 = v110;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (long col = lid; col < s0; col += 256) {
      const long v111 = (grp * s0);
      const long v112 = (v111 + col);
      const float v113 = b1[v112];
      const float v114 = (v113 - tot4);
      const float v115 = metal::precise::exp(v114);
      const float v116 = (v115 / tot8);
      b0[v112] = v116;
    }
