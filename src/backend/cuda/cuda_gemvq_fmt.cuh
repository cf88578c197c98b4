/* How the decode GEMV of the block types (cuda_gemvq.cuh) reads a block:
 * per type, which lanes take which part of a block out of shared memory,
 * in which order their weights meet x, and the integer dot products.
 *
 * x is int16 with one f32 scale per 32 (as for q8_0, cuda_gemv.cu says
 * why int16), quantized once per launch into shared memory with, per 16,
 * the sum of its int16 values: offsets and mins (q - 8, d*q + m, the
 * K-quants' d*sc*q - dmin*m) then cost one multiply per sub-block instead
 * of one per weight, and the weights enter dp2a as their raw unsigned
 * quants (all < 128, so the signed bytes read the same).
 *
 * A lane's part of a block is a "unit": a whole block for the 32-weight
 * types, a quarter super-block (64 weights) for the K-quants and IQ4_XS.
 * x is stored unit by unit, each unit's values in the order its lane
 * consumes them (chunks of 8 int16: four weights from low nibbles beside
 * the four that share their bytes' high nibbles, and so on per type), and
 * the 16-byte chunks of a unit rotated by the unit's index so that the 8
 * lanes of a 128-bit shared-memory access hit 8 different bank groups.
 *
 * Everything here also compiles for the host, where the intrinsics have C
 * stand-ins, so the layouts can be checked against the reference
 * dequantization without a GPU. */
#ifndef CLEAVE_CUDA_GEMVQ_FMT_CUH
#define CLEAVE_CUDA_GEMVQ_FMT_CUH

#include "cuda_quant.cuh"

#define GQ_HD __host__ __device__ __forceinline__
/* #pragma unroll for the device pass only (the host compiler warns) */
#ifdef __CUDA_ARCH__
#define GQ_UNROLL _Pragma("unroll")
#else
#define GQ_UNROLL
#endif

/* ---- intrinsics, with host stand-ins ------------------------------------- */

/* c + a.lo16 * b.byte0 + a.hi16 * b.byte1 (signed), and the same with bytes 2, 3 */
GQ_HD int gq_dp2a_lo(uint32_t a, uint32_t b, int c) {
#ifdef __CUDA_ARCH__
    return __dp2a_lo((int)a, (int)b, c);
#else
    return c + (int16_t)(a & 0xffff) * (int8_t)(b & 0xff) +
           (int16_t)(a >> 16) * (int8_t)((b >> 8) & 0xff);
#endif
}
GQ_HD int gq_dp2a_hi(uint32_t a, uint32_t b, int c) {
#ifdef __CUDA_ARCH__
    return __dp2a_hi((int)a, (int)b, c);
#else
    return c + (int16_t)(a & 0xffff) * (int8_t)((b >> 16) & 0xff) +
           (int16_t)(a >> 16) * (int8_t)(b >> 24);
#endif
}
/* byte i of the result = byte (s >> 4 i) & 7 of y:x */
GQ_HD uint32_t gq_prmt(uint32_t x, uint32_t y, uint32_t s) {
#ifdef __CUDA_ARCH__
    return __byte_perm(x, y, s);
#else
    uint64_t v = (uint64_t)y << 32 | x;
    uint32_t r = 0;
    for (int i = 0; i < 4; i++)
        r |= (uint32_t)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
    return r;
#endif
}
/* the low word of hi:lo >> sh (sh < 32) */
GQ_HD uint32_t gq_fshr(uint32_t lo, uint32_t hi, uint32_t sh) {
#ifdef __CUDA_ARCH__
    return __funnelshift_r(lo, hi, sh);
#else
    return sh ? lo >> sh | hi << (32 - sh) : lo;
#endif
}

/* ---- shared-memory reads: sm is the buffer, off a byte offset ------------ */

GQ_HD float gq_h(const uint8_t *sm, uint32_t off) { /* f16, off even */
    return __half2float(__ushort_as_half(*(const unsigned short *)(sm + off)));
}
GQ_HD uint32_t gq_u16(const uint8_t *sm, uint32_t off) {
    return *(const unsigned short *)(sm + off);
}
/* 16 bytes at an even offset: five aligned words, funnel-shifted (the
 * fifth may be the first word past the bytes; buffers carry slack) */
GQ_HD void gq_ld16(const uint8_t *sm, uint32_t off, uint32_t (&w)[4]) {
    const uint32_t *a = (const uint32_t *)(sm + (off & ~3u));
    uint32_t sh = (off & 2u) * 8u, v[5];
    GQ_UNROLL
    for (int k = 0; k < 5; k++)
        v[k] = a[k];
    GQ_UNROLL
    for (int k = 0; k < 4; k++)
        w[k] = gq_fshr(v[k], v[k + 1], sh);
}

/* 4 two-bit fields at bit 0 of each byte, from the low 4 bits of h */
GQ_HD uint32_t gq_spread4(uint32_t h) { return (h * 0x00204081u) & 0x01010101u; }

/* IQ4: the table values of the 8 nibbles of q, low nibbles' in lo (byte i
 * from byte i of q) and high nibbles' in hi; the 16 levels are four words,
 * bit 3 of a nibble picks the upper two */
GQ_HD void gq_iq4_lut(uint32_t q, uint32_t &lo, uint32_t &hi) {
    uint32_t qm = q & 0x77777777u, sel = 0x32103210u | ((q & 0x88888888u) >> 1), r[2];
    GQ_UNROLL
    for (int i = 0; i < 2; i++) {
        uint32_t a = gq_prmt(CQ_IQ4_W0, CQ_IQ4_W1, qm >> (16 * i));
        uint32_t b = gq_prmt(CQ_IQ4_W2, CQ_IQ4_W3, qm >> (16 * i));
        r[i] = gq_prmt(a, b, sel >> (16 * i));
    }
    lo = gq_prmt(r[0], r[1], 0x6420u);
    hi = gq_prmt(r[0], r[1], 0x7531u);
}

/* ---- x in shared memory ---------------------------------------------------- */

/* token t's x: int16 in unit order, an f32 scale per 32, an int32 sum per
 * 16 (both in the original order); per token ne0, ne0/32, ne0/16 of them */
struct gq_x {
    const int16_t *xq;
    const float *xd;
    const int32_t *xs;
    size_t ne0;
};

/* the rotation of unit u's 16-byte chunks (LW int16 per unit) */
template <int LW> GQ_HD int gq_swz(size_t u) {
    return LW == 32 ? (int)((u >> 1) & 3) : (int)(u & 7);
}

/* chunk c of unit u for token t */
template <int LW> GQ_HD uint4 gq_xc(const gq_x &x, int t, size_t u, int c) {
    return *(const uint4 *)(x.xq + (size_t)t * x.ne0 + u * LW + 8 * (c ^ gq_swz<LW>(u)));
}
GQ_HD float gq_xd(const gq_x &x, int t, size_t g32) { return x.xd[(size_t)t * (x.ne0 / 32) + g32]; }
GQ_HD int gq_xs(const gq_x &x, int t, size_t g16) { return x.xs[(size_t)t * (x.ne0 / 16) + g16]; }

/* sa += chunk . (lo bytes, then hi bytes); sa and sb may be one variable */
GQ_HD void gq_dot8(const uint4 &v, uint32_t lo, uint32_t hi, int &sa, int &sb) {
    sa = gq_dp2a_lo(v.x, lo, sa);
    sa = gq_dp2a_hi(v.y, lo, sa);
    sb = gq_dp2a_lo(v.z, hi, sb);
    sb = gq_dp2a_hi(v.w, hi, sb);
}

#define GQ_LO4 0x0F0F0F0Fu

/* ---- the formats --------------------------------------------------------------
 * Each: QK, BLK; LPB lanes per block; LW x values per unit (QK / LPB); GB
 * blocks per round (a warp's 32 lanes: 32 blocks or 8 super-blocks);
 * ALIGN, the alignment its reads need of a block's offset; xmap (block
 * position i -> unit q, chunk c, slot e); dot (block at byte off of sm,
 * unit q of block blk of the row: acc[t] += that part of x[t] . row). */

template <int T> struct gq;

/* what every format has: the block's size, and units of QK / LPB weights
 * so that the 32 lanes of a warp take 32 / LPB blocks a round */
template <int T, int LPB_> struct gq_base {
    static constexpr int QK = cq_fmt<T>::QK, BLK = cq_fmt<T>::BLK, LPB = LPB_, LW = QK / LPB,
                         GB = 32 / LPB;
};

template <int T> struct gq_legacy_base : gq_base<T, 1> {
    static constexpr int ALIGN = 2;
    /* qs byte j holds weights j (low nibble) and j + 16: word k's low
     * nibbles meet chunk k's slots 0-3, its high nibbles slots 4-7 */
    GQ_HD static void xmap(int i, int &q, int &c, int &e) {
        q = 0;
        c = (i & 15) >> 2;
        e = (i & 3) + 4 * (i >> 4);
    }
};

/* the four words of nibbles at qs_off, as low and high bytes (+ a fifth
 * bit from qh for Q5) */
template <bool Q5>
GQ_HD void gq_legacy_words(const uint8_t *sm, uint32_t off, uint32_t qs_off, uint32_t qh_off,
                           uint32_t (&lo)[4], uint32_t (&hi)[4]) {
    uint32_t w[4];
    gq_ld16(sm, off + qs_off, w);
    uint32_t qh = 0;
    if (Q5) qh = gq_u16(sm, off + qh_off) | gq_u16(sm, off + qh_off + 2) << 16;
    GQ_UNROLL
    for (int k = 0; k < 4; k++) {
        lo[k] = w[k] & GQ_LO4;
        hi[k] = (w[k] >> 4) & GQ_LO4;
        if (Q5) {
            lo[k] |= gq_spread4((qh >> (4 * k)) & 0xF) << 4;
            hi[k] |= gq_spread4((qh >> (16 + 4 * k)) & 0xF) << 4;
        }
    }
}

/* the 32-weight types: w = d (q - off) or d q + m */
template <int T> struct gq_legacy : gq_legacy_base<T> {
    template <int N>
    GQ_HD static void dot(const uint8_t *sm, uint32_t off, int, size_t blk, const gq_x &x,
                          float (&acc)[N]) {
        constexpr bool Q5 = T == CLEAVE_TYPE_Q5_0 || T == CLEAVE_TYPE_Q5_1;
        constexpr bool MIN = T == CLEAVE_TYPE_Q4_1 || T == CLEAVE_TYPE_Q5_1;
        constexpr int qh_off = MIN ? 4 : 2, qs_off = (MIN ? 4 : 2) + (Q5 ? 4 : 0);
        constexpr int zero = T == CLEAVE_TYPE_Q4_0 ? 8 : T == CLEAVE_TYPE_Q5_0 ? 16 : 0;
        uint32_t lo[4], hi[4];
        if constexpr (T == CLEAVE_TYPE_IQ4_NL) {
            uint32_t w[4];
            gq_ld16(sm, off + 2, w);
            GQ_UNROLL
            for (int k = 0; k < 4; k++)
                gq_iq4_lut(w[k], lo[k], hi[k]);
        } else {
            gq_legacy_words<Q5>(sm, off, qs_off, qh_off, lo, hi);
        }
        float d = gq_h(sm, off), m = MIN ? gq_h(sm, off + 2) : 0.0f;
        GQ_UNROLL
        for (int t = 0; t < N; t++) {
            int s = 0;
            GQ_UNROLL
            for (int k = 0; k < 4; k++)
                gq_dot8(gq_xc<32>(x, t, blk, k), lo[k], hi[k], s, s);
            float dx = gq_xd(x, t, blk);
            if constexpr (T == CLEAVE_TYPE_IQ4_NL) {
                acc[t] += dx * d * (float)s;
            } else {
                int X = gq_xs(x, t, 2 * blk) + gq_xs(x, t, 2 * blk + 1);
                if constexpr (MIN)
                    acc[t] += dx * (d * (float)s + m * (float)X);
                else
                    acc[t] += dx * d * (float)(s - zero * X);
            }
        }
    }
};
template <> struct gq<CLEAVE_TYPE_Q4_0> : gq_legacy<CLEAVE_TYPE_Q4_0> {};
template <> struct gq<CLEAVE_TYPE_Q4_1> : gq_legacy<CLEAVE_TYPE_Q4_1> {};
template <> struct gq<CLEAVE_TYPE_Q5_0> : gq_legacy<CLEAVE_TYPE_Q5_0> {};
template <> struct gq<CLEAVE_TYPE_Q5_1> : gq_legacy<CLEAVE_TYPE_Q5_1> {};
template <> struct gq<CLEAVE_TYPE_IQ4_NL> : gq_legacy<CLEAVE_TYPE_IQ4_NL> {};

/* Q4_K, Q5_K: unit q = sub-blocks 2q (low nibbles of qs bytes 32q..+32)
 * and 2q+1 (their high nibbles); blocks are 144 and 176 bytes, so every
 * block of a 16-byte aligned row is 16-byte aligned */
template <int T> struct gq_k45 : gq_base<T, 4> {
    static constexpr int ALIGN = 16;
    GQ_HD static void xmap(int i, int &q, int &c, int &e) {
        int r = i & 63;
        q = i >> 6;
        c = (r & 31) >> 2;
        e = (r & 3) + 4 * (r >> 5);
    }
    template <int N>
    GQ_HD static void dot(const uint8_t *sm, uint32_t off, int q, size_t blk, const gq_x &x,
                          float (&acc)[N]) {
        constexpr bool Q5 = T == CLEAVE_TYPE_Q5_K;
        const uint4 hd = *(const uint4 *)(sm + off); /* d, dmin, scales[12] */
        const uint4 *qs = (const uint4 *)(sm + off + (Q5 ? 48 : 16) + 32 * q);
        const uint4 qa = qs[0], qb = qs[1];
        const uint32_t W[8] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w};
        uint32_t H[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        if (Q5) {
            const uint4 *qh = (const uint4 *)(sm + off + 16);
            const uint4 ha = qh[0], hb = qh[1];
            H[0] = ha.x, H[1] = ha.y, H[2] = ha.z, H[3] = ha.w;
            H[4] = hb.x, H[5] = hb.y, H[6] = hb.z, H[7] = hb.w;
        }
        /* six-bit scale and min of sub-blocks 2q, 2q + 1 (quant_k4_scale_min) */
        int sc[2], mn[2];
        GQ_UNROLL
        for (int h = 0; h < 2; h++) {
            int j = 2 * q + h, sh = 8 * (j & 3);
            uint32_t b0 = (hd.y >> sh) & 0xFF, b1 = (hd.z >> sh) & 0xFF, b2 = (hd.w >> sh) & 0xFF;
            sc[h] = j < 4 ? (int)(b0 & 63) : (int)((b2 & 0xF) | (b0 >> 6) << 4);
            mn[h] = j < 4 ? (int)(b1 & 63) : (int)((b2 >> 4) | (b1 >> 6) << 4);
        }
        float d = __half2float(__ushort_as_half((unsigned short)(hd.x & 0xffff)));
        float dmin = __half2float(__ushort_as_half((unsigned short)(hd.x >> 16)));
        float ds0 = d * (float)sc[0], ds1 = d * (float)sc[1];
        float dm0 = dmin * (float)mn[0], dm1 = dmin * (float)mn[1];
        uint32_t lo[8], hi[8];
        GQ_UNROLL
        for (int c = 0; c < 8; c++) {
            lo[c] = W[c] & GQ_LO4;
            hi[c] = (W[c] >> 4) & GQ_LO4;
            if (Q5) {
                lo[c] |= ((H[c] >> (2 * q)) & 0x01010101u) << 4;
                hi[c] |= ((H[c] >> (2 * q + 1)) & 0x01010101u) << 4;
            }
        }
        const size_t u = blk * 4 + q, g0 = blk * 8 + 2 * q;
        GQ_UNROLL
        for (int t = 0; t < N; t++) {
            int s0 = 0, s1 = 0;
            GQ_UNROLL
            for (int c = 0; c < 8; c++)
                gq_dot8(gq_xc<64>(x, t, u, c), lo[c], hi[c], s0, s1);
            int X0 = gq_xs(x, t, 2 * g0) + gq_xs(x, t, 2 * g0 + 1);
            int X1 = gq_xs(x, t, 2 * g0 + 2) + gq_xs(x, t, 2 * g0 + 3);
            acc[t] += gq_xd(x, t, g0) * (ds0 * (float)s0 - dm0 * (float)X0) +
                      gq_xd(x, t, g0 + 1) * (ds1 * (float)s1 - dm1 * (float)X1);
        }
    }
};
template <> struct gq<CLEAVE_TYPE_Q4_K> : gq_k45<CLEAVE_TYPE_Q4_K> {};
template <> struct gq<CLEAVE_TYPE_Q5_K> : gq_k45<CLEAVE_TYPE_Q5_K> {};

/* IQ4_XS (136-byte blocks, 8-byte aligned in an 8-byte aligned row): unit
 * q = sub-blocks 2q, 2q + 1, each as an IQ4_NL block */
template <> struct gq<CLEAVE_TYPE_IQ4_XS> : gq_base<CLEAVE_TYPE_IQ4_XS, 4> {
    static constexpr int ALIGN = 8;
    GQ_HD static void xmap(int i, int &q, int &c, int &e) {
        int r = i & 63, j = r & 31;
        q = i >> 6;
        c = 4 * (r >> 5) + ((j & 15) >> 2);
        e = (j & 3) + 4 * (j >> 4);
    }
    template <int N>
    GQ_HD static void dot(const uint8_t *sm, uint32_t off, int q, size_t blk, const gq_x &x,
                          float (&acc)[N]) {
        const uint2 hd = *(const uint2 *)(sm + off); /* d, scales_h, scales_l[4] */
        const uint2 *qs = (const uint2 *)(sm + off + 8 + 32 * q);
        uint32_t lo[8], hi[8];
        GQ_UNROLL
        for (int k = 0; k < 4; k++) {
            const uint2 v = qs[k];
            gq_iq4_lut(v.x, lo[2 * k], hi[2 * k]);
            gq_iq4_lut(v.y, lo[2 * k + 1], hi[2 * k + 1]);
        }
        uint32_t sl = (hd.y >> (8 * q)) & 0xFF, sh = hd.x >> 16;
        int ls0 = (int)((sl & 0xF) | ((sh >> (4 * q)) & 3) << 4) - 32;
        int ls1 = (int)((sl >> 4) | ((sh >> (4 * q + 2)) & 3) << 4) - 32;
        float d = __half2float(__ushort_as_half((unsigned short)(hd.x & 0xffff)));
        float d0 = d * (float)ls0, d1 = d * (float)ls1;
        const size_t u = blk * 4 + q, g0 = blk * 8 + 2 * q;
        GQ_UNROLL
        for (int t = 0; t < N; t++) {
            int s0 = 0, s1 = 0;
            GQ_UNROLL
            for (int c = 0; c < 4; c++)
                gq_dot8(gq_xc<64>(x, t, u, c), lo[c], hi[c], s0, s0);
            GQ_UNROLL
            for (int c = 4; c < 8; c++)
                gq_dot8(gq_xc<64>(x, t, u, c), lo[c], hi[c], s1, s1);
            acc[t] += gq_xd(x, t, g0) * d0 * (float)s0 + gq_xd(x, t, g0 + 1) * d1 * (float)s1;
        }
    }
};

/* Q6_K (210 bytes: only 2-byte alignment): unit q = half h = q / 2 of the
 * super-block, positions l in [16 (q % 2), +16) of its four quarters
 * (ql[l] low and high nibble, ql[l + 32] low and high; qh[l] two bits
 * each): 4 sub-blocks of 16 */
template <> struct gq<CLEAVE_TYPE_Q6_K> : gq_base<CLEAVE_TYPE_Q6_K, 4> {
    static constexpr int ALIGN = 2;
    GQ_HD static void xmap(int i, int &q, int &c, int &e) {
        int h = i >> 7, r = i & 127, g = r >> 5, l = r & 31, l4 = l & 15;
        q = 2 * h + (l >> 4);
        c = 2 * (l4 >> 2) + (g & 1);
        e = (l4 & 3) + 4 * (g >> 1);
    }
    template <int N>
    GQ_HD static void dot(const uint8_t *sm, uint32_t off, int q, size_t blk, const gq_x &x,
                          float (&acc)[N]) {
        const int h = q >> 1, l0 = 16 * (q & 1);
        uint32_t A[4], B[4], H[4];
        gq_ld16(sm, off + 64 * h + l0, A);
        gq_ld16(sm, off + 64 * h + 32 + l0, B);
        gq_ld16(sm, off + 128 + 32 * h + l0, H);
        float d = gq_h(sm, off + 208), dsc[4];
        GQ_UNROLL
        for (int g = 0; g < 4; g++)
            dsc[g] = d * (float)(int8_t)sm[off + 192 + 8 * h + (q & 1) + 2 * g];
        uint32_t v[4][4]; /* [word][quarter g] */
        GQ_UNROLL
        for (int k = 0; k < 4; k++) {
            v[k][0] = (A[k] & GQ_LO4) | (H[k] & 0x03030303u) << 4;
            v[k][1] = (B[k] & GQ_LO4) | ((H[k] >> 2) & 0x03030303u) << 4;
            v[k][2] = ((A[k] >> 4) & GQ_LO4) | ((H[k] >> 4) & 0x03030303u) << 4;
            v[k][3] = ((B[k] >> 4) & GQ_LO4) | ((H[k] >> 6) & 0x03030303u) << 4;
        }
        const size_t u = blk * 4 + q, g32 = blk * 8 + 4 * h, g16 = blk * 16 + 8 * h + (q & 1);
        GQ_UNROLL
        for (int t = 0; t < N; t++) {
            int s[4] = {0, 0, 0, 0};
            GQ_UNROLL
            for (int k = 0; k < 4; k++) {
                gq_dot8(gq_xc<64>(x, t, u, 2 * k), v[k][0], v[k][2], s[0], s[2]);
                gq_dot8(gq_xc<64>(x, t, u, 2 * k + 1), v[k][1], v[k][3], s[1], s[3]);
            }
            float a = 0.0f;
            GQ_UNROLL
            for (int g = 0; g < 4; g++)
                a += gq_xd(x, t, g32 + g) * dsc[g] * (float)(s[g] - 32 * gq_xs(x, t, g16 + 2 * g));
            acc[t] += a;
        }
    }
};

/* Q2_K (84 bytes) and Q3_K (110): unit q = half j = q / 2 of the
 * super-block, bytes k in [16 (q % 2), +16) of its 32 qs bytes, all four
 * shifts s (weights 128 j + 32 s + k): 4 sub-blocks of 16 */
template <int T> struct gq_k23 : gq_base<T, 4> {
    static constexpr int ALIGN = 2;
    GQ_HD static void xmap(int i, int &q, int &c, int &e) {
        int j = i >> 7, r = i & 127, s = r >> 5, r2 = r & 31, l = r2 & 15;
        q = 2 * j + (r2 >> 4);
        c = 2 * (l >> 2) + (s >> 1);
        e = (l & 3) + 4 * (s & 1);
    }
    template <int N>
    GQ_HD static void dot(const uint8_t *sm, uint32_t off, int q, size_t blk, const gq_x &x,
                          float (&acc)[N]) {
        constexpr bool Q3 = T == CLEAVE_TYPE_Q3_K;
        const int j = q >> 1, hf = q & 1;
        uint32_t Q[4], M[4] = {0, 0, 0, 0};
        gq_ld16(sm, off + (Q3 ? 32 : 16) + 32 * j + 16 * hf, Q);
        if (Q3) gq_ld16(sm, off + 16 * hf, M);
        float d = gq_h(sm, off + (Q3 ? 108 : 80)), dsc[4], dmn[4] = {0, 0, 0, 0};
        if constexpr (Q3) {
            const uint8_t *p = sm + off + 96; /* quant_q3_K_scales, i = 8 j + 2 s + hf */
            GQ_UNROLL
            for (int s = 0; s < 4; s++) {
                int low = (p[2 * s + hf] >> (4 * j)) & 0xF;
                int high = (p[8 + 2 * (s & 1) + hf] >> (2 * (2 * j + (s >> 1)))) & 3;
                dsc[s] = d * (float)((low | high << 4) - 32);
            }
        } else {
            float dmin = gq_h(sm, off + 82);
            GQ_UNROLL
            for (int s = 0; s < 4; s++) {
                int sc = sm[off + 8 * j + 2 * s + hf];
                dsc[s] = d * (float)(sc & 0xF);
                dmn[s] = dmin * (float)(sc >> 4);
            }
        }
        uint32_t v[4][4]; /* [word][shift s]: q (+ 4 where Q3_K's hmask bit is set) */
        GQ_UNROLL
        for (int k = 0; k < 4; k++)
            GQ_UNROLL
        for (int s = 0; s < 4; s++) {
            v[k][s] = (Q[k] >> (2 * s)) & 0x03030303u;
            if (Q3) v[k][s] |= ((M[k] >> (4 * j + s)) & 0x01010101u) << 2;
        }
        const size_t u = blk * 4 + q, g32 = blk * 8 + 4 * j, g16 = blk * 16 + 8 * j + hf;
        GQ_UNROLL
        for (int t = 0; t < N; t++) {
            int sm4[4] = {0, 0, 0, 0};
            GQ_UNROLL
            for (int k = 0; k < 4; k++) {
                gq_dot8(gq_xc<64>(x, t, u, 2 * k), v[k][0], v[k][1], sm4[0], sm4[1]);
                gq_dot8(gq_xc<64>(x, t, u, 2 * k + 1), v[k][2], v[k][3], sm4[2], sm4[3]);
            }
            float a = 0.0f;
            GQ_UNROLL
            for (int s = 0; s < 4; s++) {
                int X = gq_xs(x, t, g16 + 2 * s);
                if constexpr (Q3)
                    a += gq_xd(x, t, g32 + s) * dsc[s] * (float)(sm4[s] - 4 * X);
                else
                    a += gq_xd(x, t, g32 + s) * (dsc[s] * (float)sm4[s] - dmn[s] * (float)X);
            }
            acc[t] += a;
        }
    }
};
template <> struct gq<CLEAVE_TYPE_Q2_K> : gq_k23<CLEAVE_TYPE_Q2_K> {};
template <> struct gq<CLEAVE_TYPE_Q3_K> : gq_k23<CLEAVE_TYPE_Q3_K> {};

#endif
