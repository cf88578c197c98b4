/* How the decode GEMV of the block types (cuda_gemvq.cuh) reads a block:
 * per type, which lanes take which part of a block out of shared memory,
 * in which order their weights meet x, and the integer dot products.
 *
 * x is int16 with one f32 scale per 32 (as for q8_0, cuda_gemv.cu says
 * why int16), quantized once per launch into shared memory with the sum
 * of its int16 values per sub-block: offsets and mins (q - 8, d*q + m,
 * the K-quants' d*sc*q - dmin*m) then cost one multiply per sub-block
 * instead of one per weight, and the weights enter dp2a as their raw
 * unsigned quants (all < 128, so the signed bytes read the same).
 *
 * A lane's part of a block is a "unit": a whole block for the 32-weight
 * types, a quarter super-block (64 weights) for the K-quants and IQ4_XS.
 * x is stored unit by unit, each unit's values in the order its lane
 * consumes them (chunks of 8 int16: four weights from low nibbles beside
 * the four that share their bytes' high nibbles, and so on per type), and
 * the 16-byte chunks of a unit rotated by the unit's index so that the 8
 * lanes of a 128-bit shared-memory access hit 8 different bank groups.
 * Beside it, per unit, the scales and sums its sub-blocks need, side by
 * side, so a lane reads them with one or two 16-byte loads: shared-memory
 * wavefronts, not DRAM, bounded the first version of this kernel (one
 * 4-byte load per scale and per sum, 4-way bank conflicts, a third of all
 * wavefronts for Q6_K).
 *
 * A format decodes its part of a block into words of 4 quants (gq_rowv)
 * and per-sub-block factors; gq_dot then multiplies M such rows (a
 * gate/up pair) with each x chunk it loads once.
 *
 * Everything here also compiles for the host, where the intrinsics have C
 * stand-ins, so the layouts can be checked against the reference
 * dequantization without a GPU. */
#ifndef CLEAVE_CUDA_GEMVQ_FMT_CUH
#define CLEAVE_CUDA_GEMVQ_FMT_CUH

#include <string.h>

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
/* 16 bytes at any offset (MXFP4's 17-byte blocks start at odd ones):
 * five aligned words, funnel-shifted (the fifth may be the first word
 * past the bytes; buffers carry slack) */
GQ_HD void gq_ld16(const uint8_t *sm, uint32_t off, uint32_t (&w)[4]) {
    const uint32_t *a = (const uint32_t *)(sm + (off & ~3u));
    uint32_t sh = (off & 3u) * 8u, v[5];
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
template <uint32_t W0 = CQ_IQ4_W0, uint32_t W1 = CQ_IQ4_W1, uint32_t W2 = CQ_IQ4_W2, uint32_t W3 = CQ_IQ4_W3>
GQ_HD void gq_iq4_lut(uint32_t q, uint32_t &lo, uint32_t &hi) {
    uint32_t qm = q & 0x77777777u, sel = 0x32103210u | ((q & 0x88888888u) >> 1), r[2];
    GQ_UNROLL
    for (int i = 0; i < 2; i++) {
        uint32_t a = gq_prmt(W0, W1, qm >> (16 * i));
        uint32_t b = gq_prmt(W2, W3, qm >> (16 * i));
        r[i] = gq_prmt(a, b, sel >> (16 * i));
    }
    lo = gq_prmt(r[0], r[1], 0x6420u);
    hi = gq_prmt(r[0], r[1], 0x7531u);
}

/* ---- x in shared memory ---------------------------------------------------- */

/* token t's x: int16 in unit order; per unit, MW words of its sub-blocks'
 * x scales (f32) then their sums (int32) */
struct gq_x {
    const int16_t *xq;
    const uint32_t *meta;
    size_t ne0;
};

/* the rotation of unit u's 16-byte chunks (LW int16 per unit) */
template <int LW> GQ_HD int gq_swz(size_t u) {
    return LW == 32 ? (int)((u >> 1) & 3) : (int)(u & 7);
}

GQ_HD float gq_f32(uint32_t v) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(v);
#else
    float f;
    memcpy(&f, &v, 4);
    return f;
#endif
}
GQ_HD uint32_t gq_u32(float f) {
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t v;
    memcpy(&v, &f, 4);
    return v;
#endif
}

#define GQ_LO4 0x0F0F0F0Fu

/* A unit's quants as dp2a takes them: word c of lo meets slots 0-3 of x
 * chunk c, word c of hi its slots 4-7; a[s] and b[s] are sub-block s's
 * factors: x_s . w_s = dx_s (a[s] (S_s - ZERO X_s) + b[s] X_s), S_s the
 * integer dot with the quants, X_s the sum of x_s. */
template <int C, int NS> struct gq_rowv {
    uint32_t lo[C], hi[C];
    float a[NS], b[NS];
};

/* ---- the formats --------------------------------------------------------------
 * Each: QK, BLK; LPB lanes per block; LW x values per unit (QK / LPB), C
 * chunks of 8 of them; GB blocks per round (a warp's 32 lanes U times:
 * 32 U blocks or 8 U super-blocks); ALIGN, the alignment its reads need
 * of a block's offset; NS sub-blocks per unit, of GSZ weights; ZERO, the quants' offset;
 * sub_lo/sub_hi(c), the sub-blocks of chunk c's halves; xmap (position i
 * of a block -> unit q, chunk c, slot e); meta_at (GSZ-group k of a block
 * -> unit q, sub-block slot); load (the part q of the block at byte off of
 * sm). */

template <int T> struct gq;

/* U units a lane per round: a round's fixed costs (the ring's wait and
 * refill, the cursor) shared by more weights. 2 for the 32-weight types
 * (a round of 32 units is 576 bytes of Q4_0) and Q4_K/Q5_K; Q6_K's larger
 * rounds, doubled, would crowd x out of shared memory. */
template <int T, int LPB_, int U_ = 1> struct gq_base {
    static constexpr int QK = cq_fmt<T>::QK, BLK = cq_fmt<T>::BLK, LPB = LPB_, LW = QK / LPB,
                         C = LW / 8, U = U_, GB = U * 32 / LPB;
};

/* the 32-weight types: qs byte j holds weights j (low nibble) and j + 16,
 * so word k's low nibbles meet chunk k's slots 0-3, its high nibbles
 * slots 4-7; one sub-block, w = d (q - ZERO) or d q + m. MXFP4 reads as
 * IQ4_NL with its own table and an E8M0 byte for d (17-byte blocks, so
 * any byte offset). */
template <int T> struct gq_legacy : gq_base<T, 1, 2> {
    static constexpr bool MX = T == CLEAVE_TYPE_MXFP4;
    static constexpr int ALIGN = MX ? 1 : 2, NS = 1, GSZ = 32;
    static constexpr bool Q5 = T == CLEAVE_TYPE_Q5_0 || T == CLEAVE_TYPE_Q5_1;
    static constexpr bool MIN = T == CLEAVE_TYPE_Q4_1 || T == CLEAVE_TYPE_Q5_1;
    static constexpr int ZERO = T == CLEAVE_TYPE_Q4_0 ? 8 : T == CLEAVE_TYPE_Q5_0 ? 16 : 0;
    typedef gq_rowv<4, 1> row;
    GQ_HD static int sub_lo(int) { return 0; }
    GQ_HD static int sub_hi(int) { return 0; }
    GQ_HD static void xmap(int i, int &q, int &c, int &e) {
        q = 0;
        c = (i & 15) >> 2;
        e = (i & 3) + 4 * (i >> 4);
    }
    GQ_HD static void meta_at(int, int &q, int &slot) { q = 0, slot = 0; }
    GQ_HD static void load(const uint8_t *sm, uint32_t off, int, row &r) {
        constexpr int qh_off = MIN ? 4 : 2, qs_off = MX ? 1 : (MIN ? 4 : 2) + (Q5 ? 4 : 0);
        uint32_t w[4];
        gq_ld16(sm, off + qs_off, w);
        uint32_t qh = 0;
        if (Q5) qh = gq_u16(sm, off + qh_off) | gq_u16(sm, off + qh_off + 2) << 16;
        GQ_UNROLL
        for (int k = 0; k < 4; k++) {
            if constexpr (T == CLEAVE_TYPE_IQ4_NL) {
                gq_iq4_lut(w[k], r.lo[k], r.hi[k]);
            } else if constexpr (MX) {
                gq_iq4_lut<CQ_MX_W0, CQ_MX_W1, CQ_MX_W2, CQ_MX_W3>(w[k], r.lo[k], r.hi[k]);
            } else {
                r.lo[k] = w[k] & GQ_LO4;
                r.hi[k] = (w[k] >> 4) & GQ_LO4;
                if (Q5) { /* bit j of qh: the fifth bit of weight j */
                    r.lo[k] |= gq_spread4((qh >> (4 * k)) & 0xF) << 4;
                    r.hi[k] |= gq_spread4((qh >> (16 + 4 * k)) & 0xF) << 4;
                }
            }
        }
        r.a[0] = MX ? cq_e8m0_half(sm[off]) : gq_h(sm, off);
        r.b[0] = MIN ? gq_h(sm, off + 2) : 0.0f;
    }
};
template <> struct gq<CLEAVE_TYPE_Q4_0> : gq_legacy<CLEAVE_TYPE_Q4_0> {};
template <> struct gq<CLEAVE_TYPE_Q4_1> : gq_legacy<CLEAVE_TYPE_Q4_1> {};
template <> struct gq<CLEAVE_TYPE_Q5_0> : gq_legacy<CLEAVE_TYPE_Q5_0> {};
template <> struct gq<CLEAVE_TYPE_Q5_1> : gq_legacy<CLEAVE_TYPE_Q5_1> {};
template <> struct gq<CLEAVE_TYPE_IQ4_NL> : gq_legacy<CLEAVE_TYPE_IQ4_NL> {};
template <> struct gq<CLEAVE_TYPE_MXFP4> : gq_legacy<CLEAVE_TYPE_MXFP4> {};

/* the formats with two 32-weight sub-blocks a unit: 32-groups 2q, 2q + 1 */
template <int T, int U = 1> struct gq_two32 : gq_base<T, 4, U> {
    static constexpr int NS = 2, GSZ = 32, ZERO = 0;
    typedef gq_rowv<8, 2> row;
    GQ_HD static void meta_at(int k, int &q, int &slot) { q = k >> 1, slot = k & 1; }
};

/* Q4_K, Q5_K: unit q = sub-blocks 2q (low nibbles of qs bytes 32q..+32)
 * and 2q+1 (their high nibbles); blocks are 144 and 176 bytes, so every
 * block of a 16-byte aligned row is 16-byte aligned */
template <int T> struct gq_k45 : gq_two32<T, 2> {
    static constexpr int ALIGN = 16;
    typedef gq_rowv<8, 2> row;
    GQ_HD static int sub_lo(int) { return 0; }
    GQ_HD static int sub_hi(int) { return 1; }
    GQ_HD static void xmap(int i, int &q, int &c, int &e) {
        int r = i & 63;
        q = i >> 6;
        c = (r & 31) >> 2;
        e = (r & 3) + 4 * (r >> 5);
    }
    GQ_HD static void load(const uint8_t *sm, uint32_t off, int q, row &r) {
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
        GQ_UNROLL
        for (int c = 0; c < 8; c++) {
            r.lo[c] = W[c] & GQ_LO4;
            r.hi[c] = (W[c] >> 4) & GQ_LO4;
            if (Q5) {
                r.lo[c] |= ((H[c] >> (2 * q)) & 0x01010101u) << 4;
                r.hi[c] |= ((H[c] >> (2 * q + 1)) & 0x01010101u) << 4;
            }
        }
        float d = __half2float(__ushort_as_half((unsigned short)(hd.x & 0xffff)));
        float dmin = __half2float(__ushort_as_half((unsigned short)(hd.x >> 16)));
        /* six-bit scale and min of sub-blocks 2q, 2q + 1 (quant_k4_scale_min) */
        GQ_UNROLL
        for (int h = 0; h < 2; h++) {
            int j = 2 * q + h, sh = 8 * (j & 3);
            uint32_t b0 = (hd.y >> sh) & 0xFF, b1 = (hd.z >> sh) & 0xFF, b2 = (hd.w >> sh) & 0xFF;
            int sc = j < 4 ? (int)(b0 & 63) : (int)((b2 & 0xF) | (b0 >> 6) << 4);
            int mn = j < 4 ? (int)(b1 & 63) : (int)((b2 >> 4) | (b1 >> 6) << 4);
            r.a[h] = d * (float)sc;
            r.b[h] = -dmin * (float)mn;
        }
    }
};
template <> struct gq<CLEAVE_TYPE_Q4_K> : gq_k45<CLEAVE_TYPE_Q4_K> {};
template <> struct gq<CLEAVE_TYPE_Q5_K> : gq_k45<CLEAVE_TYPE_Q5_K> {};

/* IQ4_XS (136-byte blocks, 8-byte aligned in an 8-byte aligned row): unit
 * q = sub-blocks 2q, 2q + 1, each as an IQ4_NL block */
template <> struct gq<CLEAVE_TYPE_IQ4_XS> : gq_two32<CLEAVE_TYPE_IQ4_XS> {
    static constexpr int ALIGN = 8;
    GQ_HD static int sub_lo(int c) { return c >> 2; }
    GQ_HD static int sub_hi(int c) { return c >> 2; }
    GQ_HD static void xmap(int i, int &q, int &c, int &e) {
        int r = i & 63, j = r & 31;
        q = i >> 6;
        c = 4 * (r >> 5) + ((j & 15) >> 2);
        e = (j & 3) + 4 * (j >> 4);
    }
    GQ_HD static void load(const uint8_t *sm, uint32_t off, int q, row &r) {
        const uint2 hd = *(const uint2 *)(sm + off); /* d, scales_h, scales_l[4] */
        const uint2 *qs = (const uint2 *)(sm + off + 8 + 32 * q);
        GQ_UNROLL
        for (int k = 0; k < 4; k++) {
            const uint2 v = qs[k];
            gq_iq4_lut(v.x, r.lo[2 * k], r.hi[2 * k]);
            gq_iq4_lut(v.y, r.lo[2 * k + 1], r.hi[2 * k + 1]);
        }
        uint32_t sl = (hd.y >> (8 * q)) & 0xFF, sh = hd.x >> 16;
        int ls0 = (int)((sl & 0xF) | ((sh >> (4 * q)) & 3) << 4) - 32;
        int ls1 = (int)((sl >> 4) | ((sh >> (4 * q + 2)) & 3) << 4) - 32;
        float d = __half2float(__ushort_as_half((unsigned short)(hd.x & 0xffff)));
        r.a[0] = d * (float)ls0, r.a[1] = d * (float)ls1;
        r.b[0] = r.b[1] = 0.0f;
    }
};

/* the formats with four 16-weight sub-blocks a unit: half q / 2 of the
 * super-block, positions 16 (q % 2) .. +16 of each of its four quarters;
 * 16-group k of the block is unit 2 (k / 8) + k % 2, sub-block (k % 8) / 2 */
template <int T> struct gq_four16 : gq_base<T, 4> {
    static constexpr int NS = 4, GSZ = 16, ALIGN = 2;
    typedef gq_rowv<8, 4> row;
    GQ_HD static void meta_at(int k, int &q, int &slot) {
        q = 2 * (k >> 3) + (k & 1), slot = (k & 7) >> 1;
    }
};

/* Q6_K (210 bytes: only 2-byte alignment): ql[l] low and high nibble,
 * ql[l + 32] low and high (quarters 0, 2, 1, 3), qh[l] two bits each;
 * chunk 2k holds quarters 0 and 2 of positions 4k.., chunk 2k+1 1 and 3 */
template <> struct gq<CLEAVE_TYPE_Q6_K> : gq_four16<CLEAVE_TYPE_Q6_K> {
    static constexpr int ZERO = 32;
    GQ_HD static int sub_lo(int c) { return c & 1; }
    GQ_HD static int sub_hi(int c) { return 2 + (c & 1); }
    GQ_HD static void xmap(int i, int &q, int &c, int &e) {
        int h = i >> 7, r = i & 127, g = r >> 5, l = r & 31, l4 = l & 15;
        q = 2 * h + (l >> 4);
        c = 2 * (l4 >> 2) + (g & 1);
        e = (l4 & 3) + 4 * (g >> 1);
    }
    GQ_HD static void load(const uint8_t *sm, uint32_t off, int q, row &r) {
        const int h = q >> 1, l0 = 16 * (q & 1);
        uint32_t A[4], B[4], H[4];
        gq_ld16(sm, off + 64 * h + l0, A);
        gq_ld16(sm, off + 64 * h + 32 + l0, B);
        gq_ld16(sm, off + 128 + 32 * h + l0, H);
        GQ_UNROLL
        for (int k = 0; k < 4; k++) {
            r.lo[2 * k] = (A[k] & GQ_LO4) | (H[k] & 0x03030303u) << 4;
            r.lo[2 * k + 1] = (B[k] & GQ_LO4) | ((H[k] >> 2) & 0x03030303u) << 4;
            r.hi[2 * k] = ((A[k] >> 4) & GQ_LO4) | ((H[k] >> 4) & 0x03030303u) << 4;
            r.hi[2 * k + 1] = ((B[k] >> 4) & GQ_LO4) | ((H[k] >> 6) & 0x03030303u) << 4;
        }
        float d = gq_h(sm, off + 208);
        GQ_UNROLL
        for (int g = 0; g < 4; g++) {
            r.a[g] = d * (float)(int8_t)sm[off + 192 + 8 * h + (q & 1) + 2 * g];
            r.b[g] = 0.0f;
        }
    }
};

/* Q2_K (84 bytes) and Q3_K (110): bytes k in [16 (q % 2), +16) of the
 * half's 32 qs bytes, all four shifts s (weights 128 j + 32 s + k); chunk
 * 2k holds shifts 0 and 1 of bytes 4k.., chunk 2k+1 shifts 2 and 3 */
template <int T> struct gq_k23 : gq_four16<T> {
    static constexpr int ZERO = T == CLEAVE_TYPE_Q3_K ? 4 : 0;
    typedef gq_rowv<8, 4> row;
    GQ_HD static int sub_lo(int c) { return 2 * (c & 1); }
    GQ_HD static int sub_hi(int c) { return 2 * (c & 1) + 1; }
    GQ_HD static void xmap(int i, int &q, int &c, int &e) {
        int j = i >> 7, r = i & 127, s = r >> 5, r2 = r & 31, l = r2 & 15;
        q = 2 * j + (r2 >> 4);
        c = 2 * (l >> 2) + (s >> 1);
        e = (l & 3) + 4 * (s & 1);
    }
    GQ_HD static void load(const uint8_t *sm, uint32_t off, int q, row &r) {
        constexpr bool Q3 = T == CLEAVE_TYPE_Q3_K;
        const int j = q >> 1, hf = q & 1;
        uint32_t Q[4], M[4] = {0, 0, 0, 0};
        gq_ld16(sm, off + (Q3 ? 32 : 16) + 32 * j + 16 * hf, Q);
        if (Q3) gq_ld16(sm, off + 16 * hf, M);
        GQ_UNROLL
        for (int k = 0; k < 4; k++) {
            uint32_t v[4]; /* shift s: q (+ 4 where Q3_K's hmask bit is set) */
            GQ_UNROLL
            for (int s = 0; s < 4; s++) {
                v[s] = (Q[k] >> (2 * s)) & 0x03030303u;
                if (Q3) v[s] |= ((M[k] >> (4 * j + s)) & 0x01010101u) << 2;
            }
            r.lo[2 * k] = v[0], r.hi[2 * k] = v[1], r.lo[2 * k + 1] = v[2], r.hi[2 * k + 1] = v[3];
        }
        float d = gq_h(sm, off + (Q3 ? 108 : 80));
        if constexpr (Q3) {
            const uint8_t *p = sm + off + 96; /* quant_q3_K_scales, i = 8 j + 2 s + hf */
            GQ_UNROLL
            for (int s = 0; s < 4; s++) {
                int low = (p[2 * s + hf] >> (4 * j)) & 0xF;
                int high = (p[8 + 2 * (s & 1) + hf] >> (2 * (2 * j + (s >> 1)))) & 3;
                r.a[s] = d * (float)((low | high << 4) - 32);
                r.b[s] = 0.0f;
            }
        } else {
            float dmin = gq_h(sm, off + 82);
            GQ_UNROLL
            for (int s = 0; s < 4; s++) {
                int sc = sm[off + 8 * j + 2 * s + hf];
                r.a[s] = d * (float)(sc & 0xF);
                r.b[s] = -dmin * (float)(sc >> 4);
            }
        }
    }
};
template <> struct gq<CLEAVE_TYPE_Q2_K> : gq_k23<CLEAVE_TYPE_Q2_K> {};
template <> struct gq<CLEAVE_TYPE_Q3_K> : gq_k23<CLEAVE_TYPE_Q3_K> {};

/* ---- x: storing it, and the dot products ----------------------------------- */

/* Words of x scales and sums per unit, and units per row. */
template <class F> GQ_HD size_t gq_meta_words(size_t ne0) { return ne0 / F::LW * 2 * F::NS; }

/* Stores 8 quantized values of token t's x, positions i0 .. i0 + 7 of the
 * row (i0 a multiple of 8), with dx (their 32-group's scale) and the sums
 * of their 16- and 32-group, which lead16 / lead32 (the group's first 8)
 * record for the group. */
template <class F>
GQ_HD void gq_put_x(int16_t *xq, uint32_t *meta, size_t ne0, size_t t, size_t i0,
                    const int (&qv)[8], float dx, int s16, int s32, bool lead16, bool lead32) {
    GQ_UNROLL
    for (int h = 0; h < 2; h++) {
        size_t i = i0 + 4 * h, blk = i / F::QK;
        int q, c, e;
        F::xmap((int)(i % F::QK), q, c, e);
        size_t u = blk * F::LPB + q;
        size_t slot = u * F::LW + 8 * (c ^ gq_swz<F::LW>(u)) + e;
        uint32_t lo = (uint32_t)(uint16_t)qv[4 * h] | (uint32_t)(uint16_t)qv[4 * h + 1] << 16;
        uint32_t hi = (uint32_t)(uint16_t)qv[4 * h + 2] | (uint32_t)(uint16_t)qv[4 * h + 3] << 16;
        *(uint2 *)(xq + t * ne0 + slot) = make_uint2(lo, hi);
    }
    if (F::GSZ == 16 ? lead16 : lead32) {
        size_t blk = i0 / F::QK;
        int q, slot;
        F::meta_at((int)((i0 % F::QK) / F::GSZ), q, slot);
        uint32_t *m = meta + t * gq_meta_words<F>(ne0) + (blk * F::LPB + q) * 2 * F::NS;
        m[slot] = gq_u32(dx);
        m[F::NS + slot] = (uint32_t)(F::GSZ == 16 ? s16 : s32);
    }
}

/* acc[m][t] += row m's unit u . the x row at xq (its unit metadata at
 * meta), for M rows of one unit */
template <class F, int N, int M>
GQ_HD void gq_dot_row(const typename F::row (&r)[M], const int16_t *xq, const uint32_t *meta, size_t u,
                      float (&acc)[M][N], int t) {
    constexpr int C = F::C, NS = F::NS, MW = 2 * NS;
    const int sw = gq_swz<F::LW>(u);
    const uint4 *xc = (const uint4 *)(xq + u * F::LW);
    const uint32_t *mp = meta + u * MW;
    uint32_t mt[MW];
    if constexpr (MW == 2) {
        const uint2 v = *(const uint2 *)mp;
        mt[0] = v.x, mt[1] = v.y;
    } else {
        GQ_UNROLL
        for (int k = 0; k < MW / 4; k++) {
            const uint4 v = ((const uint4 *)mp)[k];
            mt[4 * k] = v.x, mt[4 * k + 1] = v.y, mt[4 * k + 2] = v.z, mt[4 * k + 3] = v.w;
        }
    }
    int S[M][NS];
    GQ_UNROLL
    for (int m = 0; m < M; m++)
        GQ_UNROLL
    for (int s = 0; s < NS; s++)
        S[m][s] = 0;
    GQ_UNROLL
    for (int c = 0; c < C; c++) {
        const uint4 v = xc[c ^ sw];
        const int sl = F::sub_lo(c), sh = F::sub_hi(c);
        GQ_UNROLL
        for (int m = 0; m < M; m++) {
            S[m][sl] = gq_dp2a_lo(v.x, r[m].lo[c], S[m][sl]);
            S[m][sl] = gq_dp2a_hi(v.y, r[m].lo[c], S[m][sl]);
            S[m][sh] = gq_dp2a_lo(v.z, r[m].hi[c], S[m][sh]);
            S[m][sh] = gq_dp2a_hi(v.w, r[m].hi[c], S[m][sh]);
        }
    }
    GQ_UNROLL
    for (int m = 0; m < M; m++) {
        float a = 0.0f;
        GQ_UNROLL
        for (int s = 0; s < NS; s++) {
            int X = (int)mt[NS + s];
            a += gq_f32(mt[s]) * (r[m].a[s] * (float)(S[m][s] - F::ZERO * X) + r[m].b[s] * (float)X);
        }
        acc[m][t] += a;
    }
}

/* acc[m][t] += row m's unit u . token t's x, for M rows of one unit */
template <class F, int N, int M>
GQ_HD void gq_dot(const typename F::row (&r)[M], const gq_x &x, size_t u, float (&acc)[M][N]) {
    GQ_UNROLL
    for (int t = 0; t < N; t++)
        gq_dot_row<F, N, M>(r, x.xq + (size_t)t * x.ne0, x.meta + (size_t)t * gq_meta_words<F>(x.ne0), u, acc, t);
}

#endif
