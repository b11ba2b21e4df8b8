// Reductions of the opencl device: sum, mean, prod, max, min, argmax, argmin, all, any and
// the 2-norm over any set of dimensions of a strided tensor.
//
// The host splits the input's dimensions into kept ones (the output's) and reduced ones,
// each merged where possible, and passes both as Dims (sizes and strides in elements,
// the last dimension fastest). Output element o reads the R = Π red.size inputs at
//   x_off + offset(o, kept) + offset(r, red),  r = 0 .. R-1,
// and writes out[out_off + o] (contiguous), for arg reductions also idx[idx_off + o] = r,
// the position in the reduced dimensions (row-major), the first one on ties.
//
//   reduce_group: one work-group of GROUP work-items per output element; each sums a
//                 strided share of r, then a tree in local memory (R large, few outputs).
//   reduce_item:  one work-item per output element, a loop over r (R small, many outputs).
//   reduce_parts, then reduce_combine: R very large and outputs too few to fill the device
//                 (a sum over a whole tensor, an argmax over a vocabulary): `parts` work-groups
//                 per output each reduce a slice of r into part_v/part_i (the accumulator
//                 and its position in r), then one work-group per output merges its `parts`
//                 partial results and stores as reduce_group does.
//
// Build options: -DOP_<sum|prod|max|min|argmax|argmin|all|any|norm2>, -DTI= input type,
// -DTO= output type (dtypes.h names), -DACC= accumulator type (float for half and bfloat:
// torch's accumulation), -DLOWEST= and -DHIGHEST= the accumulator type's extremes, -DGROUP= work-group size of reduce_group. Mean is sum with scale 1/R.

#include "dtypes.h"

#define MAX_DIMS 6
#ifndef GROUP
#define GROUP 256
#endif

typedef struct {
  int ndim;
  int size[MAX_DIMS];
  int stride[MAX_DIMS];
} Dims;

inline int offset_of(int index, const Dims d) {
  int offset = 0;
  for (int k = d.ndim - 1; k >= 0; --k) {
    offset += (index % d.size[k]) * d.stride[k];
    index /= d.size[k];
  }
  return offset;
}

#if defined(OP_argmax) || defined(OP_argmin)
#define ARG 1
#endif

#if defined(OP_sum) || defined(OP_norm2)
#define INIT ((ACC)0)
#elif defined(OP_prod)
#define INIT ((ACC)1)
#elif defined(OP_max) || defined(OP_argmax)
#define INIT LOWEST
#elif defined(OP_min) || defined(OP_argmin)
#define INIT HIGHEST
#elif defined(OP_all)
#define INIT ((ACC)1)
#elif defined(OP_any)
#define INIT ((ACC)0)
#endif

// `better(v, i, w, j)`: whether (v, i) wins over (w, j) in max/min (NaN wins, then the
// earlier index on ties).
#if defined(OP_max) || defined(OP_argmax)
#define BETTER(v, i, w, j) ((v) > (w) || ((v) != (v) && (w) == (w)) || ((v) == (w) && (i) < (j)))
#elif defined(OP_min) || defined(OP_argmin)
#define BETTER(v, i, w, j) ((v) < (w) || ((v) != (v) && (w) == (w)) || ((v) == (w) && (i) < (j)))
#endif

// acc = acc ⊕ v (for max/min through BETTER, keeping the index).
#if defined(OP_sum)
#define COMBINE(acc, ai, v, i) acc += (v)
#elif defined(OP_norm2)
#define COMBINE(acc, ai, v, i) acc += (v) * (v)
#elif defined(OP_prod)
#define COMBINE(acc, ai, v, i) acc *= (v)
#elif defined(OP_all)
#define COMBINE(acc, ai, v, i) acc = acc && ((v) != 0)
#elif defined(OP_any)
#define COMBINE(acc, ai, v, i) acc = acc || ((v) != 0)
#else
#define COMBINE(acc, ai, v, i) \
  if (BETTER((v), (i), acc, ai)) { \
    acc = (v);                     \
    ai = (i);                      \
  }
#endif
// An input element in the accumulator's type; all/any keep its truth (0.5 and NaN are true)
// rather than converting it (0.5 would become 0).
#if defined(OP_all) || defined(OP_any)
#define LOAD(value) ((ACC)((value) != 0))
#else
#define LOAD(value) ((ACC)(value))
#endif
// Partial results of two work-items merged (v, i from the other one).
#if defined(OP_sum) || defined(OP_norm2)
#define MERGE(acc, ai, v, i) acc += (v)
#else
#define MERGE(acc, ai, v, i) COMBINE(acc, ai, v, i)
#endif

#if defined(OP_norm2)
#define FINAL(acc) sqrt(acc)
#else
#define FINAL(acc) ((acc) * scale)
#endif

#ifdef ARG
#define STORE(o, acc, ai) idx[idx_off + (o)] = (ai)
#elif defined(OP_max) || defined(OP_min)
#define STORE(o, acc, ai)         \
  WRITE(TO, out, out_off + (o), acc); \
  if (with_index) idx[idx_off + (o)] = (ai)
#elif defined(OP_sum) || defined(OP_norm2)
#define STORE(o, acc, ai) WRITE(TO, out, out_off + (o), FINAL(acc))
#else
#define STORE(o, acc, ai) WRITE(TO, out, out_off + (o), acc)
#endif

#define ARGS                                                                                     \
  __global const TI *x, const int x_off, __global TO *out, const int out_off, __global long *idx, \
      const int idx_off, const int with_index, const Dims kept, const Dims red, const int R,        \
      const int outputs, const ACC scale

// Sums add runs of SUM_RUN inputs, each from zero, to the accumulator (a cascade of two
// levels, as torch's CPU sums: one long accumulator drifted to 3x torch's float32 error).
#ifndef SUM_RUN
#define SUM_RUN 16
#endif

// (*acc, *ai) combined with the inputs r = begin, begin + step, ... < end of the output whose
// first input is x[base].
inline void accumulate(__global const TI *x, const int base, const Dims red, const int begin, const int end,
                       const int step, ACC *acc, int *ai) {
#if defined(OP_sum) || defined(OP_norm2)
  for (int first = begin; first < end;) {
    const int stop = end - first > SUM_RUN * step ? first + SUM_RUN * step : end;
    ACC run = (ACC)0;
    for (int r = first; r < stop; r += step) {
      const ACC v = LOAD(READ(TI, x, base + offset_of(r, red)));
      COMBINE(run, *ai, v, r);
    }
    *acc += run;
    first = stop;
  }
#else
  for (int r = begin; r < end; r += step) {
    const ACC v = LOAD(READ(TI, x, base + offset_of(r, red)));
    COMBINE(*acc, *ai, v, r);
  }
#endif
}

// The work-group's GROUP accumulators merged through local memory into (*acc, *ai) of
// work-item 0 (every work-item of the group calls it).
inline void merge_group(ACC* acc, int* ai, __local ACC* part, __local int* part_i) {
  const int lid = get_local_id(0);
  part[lid] = *acc;
  part_i[lid] = *ai;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int step = GROUP / 2; step > 0; step /= 2) {
    if (lid < step) {
      ACC mine = part[lid];
      int mine_i = part_i[lid];
      MERGE(mine, mine_i, part[lid + step], part_i[lid + step]);
      part[lid] = mine;
      part_i[lid] = mine_i;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  *acc = part[0];
  *ai = part_i[0];
}

__kernel __attribute__((reqd_work_group_size(GROUP, 1, 1))) void reduce_group(ARGS) {
  const int o = get_group_id(0);
  const int lid = get_local_id(0);
  const int base = x_off + offset_of(o, kept);
  ACC acc = INIT;
  int ai = 0x7fffffff;
  accumulate(x, base, red, lid, R, GROUP, &acc, &ai);
  __local ACC part[GROUP];
  __local int part_i[GROUP];
  merge_group(&acc, &ai, part, part_i);
  if (lid == 0) STORE(o, acc, ai);
}

// Work-group g = o·parts + p reduces r in [p·chunk, min((p+1)·chunk, R)) of output o.
__kernel __attribute__((reqd_work_group_size(GROUP, 1, 1))) void reduce_parts(
    __global const TI *x, const int x_off, const Dims kept, const Dims red, const int R, const int chunk,
    const int parts, __global ACC *part_v, const int pv_off, __global int *part_i, const int pi_off) {
  const int g = get_group_id(0);
  const int o = g / parts, p = g % parts;
  const int lid = get_local_id(0);
  const int base = x_off + offset_of(o, kept);
  ACC acc = INIT;
  int ai = 0x7fffffff;
  accumulate(x, base, red, p * chunk + lid, min(R, (p + 1) * chunk), GROUP, &acc, &ai);
  __local ACC part[GROUP];
  __local int part_ix[GROUP];
  merge_group(&acc, &ai, part, part_ix);
  if (lid == 0) {
    part_v[pv_off + g] = acc;
    part_i[pi_off + g] = ai;
  }
}

// Work-group o merges output o's `parts` partial results (ties keep the first position: the
// partial results carry their positions in r) and stores the result.
__kernel __attribute__((reqd_work_group_size(GROUP, 1, 1))) void reduce_combine(
    __global const ACC *part_v, const int pv_off, __global const int *part_i, const int pi_off, const int parts,
    __global TO *out, const int out_off, __global long *idx, const int idx_off, const int with_index,
    const ACC scale) {
  const int o = get_group_id(0);
  const int lid = get_local_id(0);
  ACC acc = INIT;
  int ai = 0x7fffffff;
  for (int q = lid; q < parts; q += GROUP) MERGE(acc, ai, part_v[pv_off + o * parts + q], part_i[pi_off + o * parts + q]);
  __local ACC part[GROUP];
  __local int part_ix[GROUP];
  merge_group(&acc, &ai, part, part_ix);
  if (lid == 0) STORE(o, acc, ai);
}

__kernel void reduce_item(ARGS) {
  const int o = get_global_id(0);
  if (o >= outputs) return;
  const int base = x_off + offset_of(o, kept);
  ACC acc = INIT;
  int ai = 0x7fffffff;
  accumulate(x, base, red, 0, R, 1, &acc, &ai);
  STORE(o, acc, ai);
}
