/* How the batched GEMM of the block types (cuda_mmq.cu) reads weights: per
 * type, four quants of a block at a time as int8 (offset by the type's
 * ZERO, so they are all non-negative or IQ4's table values), and each
 * group's two factors, with which a weight is a (q - ZERO) + b.
 *
 * A group is the span one integer tensor-core product covers with one
 * scale: 32 weights (one k32 mma) for the types with one scale per 32,
 * 16 (one k16 mma) for Q2_K, Q3_K and Q6_K, whose scales cover 16. The
 * kernel asks for positions in natural order, four at a time, so x needs
 * no reordering to meet them.
 *
 * AL is the alignment a block has in a row whose start has it. Everything
 * reads bytes at the alignment the type guarantees (Q4_0,
 * Q5_0, IQ4_NL, Q3_K and Q6_K blocks are only 2-byte aligned in a row,
 * MXFP4's not at all),
 * and compiles for the host too, so tests check each type against the
 * reference dequantization (cq_dequant32) without a GPU. */
#ifndef CLEAVE_CUDA_MMQ_FMT_CUH
#define CLEAVE_CUDA_MMQ_FMT_CUH

#include <string.h>

#include "cuda_gemvq_fmt.cuh"

#define MQ_HD __host__ __device__ __forceinline__

/* 4 bytes at p, little-endian, p aligned to A (1, 2 or 4); at 1, two
 * aligned words funnel-shifted (the second may lie up to 3 bytes past
 * the four: the stages carry slack) */
template <int A> MQ_HD uint32_t mq_ld4(const uint8_t *p) {
#ifdef __CUDA_ARCH__
    if constexpr (A >= 4) return *(const uint32_t *)p;
    if constexpr (A == 1) {
        const uint32_t *w = (const uint32_t *)((uintptr_t)p & ~(uintptr_t)3);
        return gq_fshr(w[0], w[1], 8u * (uint32_t)((uintptr_t)p & 3));
    }
    const unsigned short *h = (const unsigned short *)p;
    return (uint32_t)h[0] | (uint32_t)h[1] << 16;
#else
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
#endif
}

/* the low (nib 0) or high (nib 1) nibbles of the four bytes of w */
MQ_HD uint32_t mq_nib(uint32_t w, int nib) { return (w >> (4 * nib)) & 0x0F0F0F0Fu; }

/* IQ4: the table values of a word's low nibbles (lo) and high nibbles
 * (hi); MXFP4's table (doubled E2M1 levels) with MX */
template <bool MX = false> MQ_HD void mq_iq4(uint32_t w, uint32_t &lo, uint32_t &hi) {
    if constexpr (MX)
        gq_iq4_lut<CQ_MX_W0, CQ_MX_W1, CQ_MX_W2, CQ_MX_W3>(w, lo, hi);
    else
        gq_iq4_lut(w, lo, hi);
}

template <int T> struct mq;

/* A paired format's four positions p .. p + 3 (within a 32-group, p % 4
 * == 0): the half of its word's quads (F::quads) that holds them */
template <class F> MQ_HD uint32_t mq_quad(const uint8_t *b, int p) {
    uint32_t lo, hi;
    F::quads(b, (p & ~31) | (p & 15), lo, hi);
    return p & 16 ? hi : lo;
}

/* A block's header as the kernel keeps it while it walks the block's
 * groups: for most types nothing (factors reads the group's scale), for
 * Q4_K/Q5_K and Q6_K the decoded scales, read once per block. */
struct mq_no_hdr {};
#define MQ_PLAIN_HDR                                                                               \
    typedef mq_no_hdr hdr;                                                                         \
    MQ_HD static void head(const uint8_t *, hdr &) {}                                              \
    MQ_HD static void factors(const hdr &, const uint8_t *b, int g, float &a, float &m) {          \
        factors(b, g, a, m);                                                                       \
    }

/* ---- one scale per 32 ------------------------------------------------------ */

/* Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4: a block is one group; qs byte j
 * holds weights j (low nibble) and j + 16 (high nibble); Q5's qh bit j is
 * the fifth bit of weight j. MXFP4 is IQ4_NL with its own table and an
 * E8M0 byte for the scale, in 17-byte blocks (any byte offset). */
template <int T> struct mq_legacy {
    static constexpr int QK = 32, G = 32, NG = 1, BLK = cq_fmt<T>::BLK;
    static constexpr bool Q5 = T == CLEAVE_TYPE_Q5_0 || T == CLEAVE_TYPE_Q5_1;
    static constexpr bool MIN = T == CLEAVE_TYPE_Q4_1 || T == CLEAVE_TYPE_Q5_1;
    static constexpr int ZERO = T == CLEAVE_TYPE_Q4_0 ? 8 : T == CLEAVE_TYPE_Q5_0 ? 16 : 0;
    static constexpr bool MX = T == CLEAVE_TYPE_MXFP4;
    static constexpr int QH = MIN ? 4 : 2, QS = MX ? 1 : QH + (Q5 ? 4 : 0);
    static constexpr int AL = BLK % 4 == 0 ? 4 : BLK % 2 == 0 ? 2 : 1; /* alignment of a block in a row */
    static constexpr bool PAIRED = true;
    /* positions p .. p + 3 (lo) and p + 16 .. p + 19 (hi), p < 16: the
     * low and high nibbles of one word */
    MQ_HD static void quads(const uint8_t *b, int p, uint32_t &lo, uint32_t &hi) {
        const uint32_t w = mq_ld4<AL>(b + QS + p);
        if constexpr (T == CLEAVE_TYPE_IQ4_NL || MX)
            mq_iq4<MX>(w, lo, hi);
        else
            lo = mq_nib(w, 0), hi = mq_nib(w, 1);
        if constexpr (Q5) {
            const uint32_t qh = mq_ld4<AL>(b + QH);
            lo |= gq_spread4((qh >> p) & 0xF) << 4;
            hi |= gq_spread4((qh >> (p + 16)) & 0xF) << 4;
        }
    }
    MQ_HD static uint32_t quad(const uint8_t *b, int p) { return mq_quad<mq_legacy>(b, p); }
    MQ_HD static void factors(const uint8_t *b, int, float &a, float &m) {
        a = MX ? cq_e8m0_half(b[0]) : cq_f16(b);
        m = MIN ? cq_f16(b + 2) : 0.0f;
    }
    MQ_PLAIN_HDR
};
template <> struct mq<CLEAVE_TYPE_Q4_0> : mq_legacy<CLEAVE_TYPE_Q4_0> {};
template <> struct mq<CLEAVE_TYPE_Q4_1> : mq_legacy<CLEAVE_TYPE_Q4_1> {};
template <> struct mq<CLEAVE_TYPE_Q5_0> : mq_legacy<CLEAVE_TYPE_Q5_0> {};
template <> struct mq<CLEAVE_TYPE_Q5_1> : mq_legacy<CLEAVE_TYPE_Q5_1> {};
template <> struct mq<CLEAVE_TYPE_IQ4_NL> : mq_legacy<CLEAVE_TYPE_IQ4_NL> {};
template <> struct mq<CLEAVE_TYPE_MXFP4> : mq_legacy<CLEAVE_TYPE_MXFP4> {};

/* Q4_K, Q5_K: group s is nibble s % 2 of qs bytes 32 (s / 2) ..; Q5_K's
 * qh byte l holds the fifth bit of position l of group s in bit s */
template <int T> struct mq_k45 {
    static constexpr int QK = 256, G = 32, NG = 8, BLK = cq_fmt<T>::BLK, ZERO = 0, AL = 4;
    static constexpr bool Q5 = T == CLEAVE_TYPE_Q5_K, PAIRED = false;
    MQ_HD static uint32_t quad(const uint8_t *b, int p) {
        const int s = p >> 5, l = p & 31;
        uint32_t q = mq_nib(mq_ld4<4>(b + (Q5 ? 48 : 16) + 32 * (s >> 1) + l), s & 1);
        if constexpr (Q5) q |= ((mq_ld4<4>(b + 16 + l) >> s) & 0x01010101u) << 4;
        return q;
    }
    MQ_HD static void factors(const uint8_t *b, int s, float &a, float &m) {
        int sc, mn;
        cq_k4_scale_min(s, b + 4, &sc, &mn);
        a = cq_f16(b) * (float)sc;
        m = -(cq_f16(b + 2) * (float)mn);
    }
    /* d, dmin and the 12 scale bytes as three words */
    struct hdr {
        float d, dmin;
        uint32_t w[3];
    };
    MQ_HD static void head(const uint8_t *b, hdr &h) {
        const uint32_t d2 = mq_ld4<4>(b);
        h.d = __half2float(__ushort_as_half((unsigned short)(d2 & 0xffff)));
        h.dmin = __half2float(__ushort_as_half((unsigned short)(d2 >> 16)));
        for (int k = 0; k < 3; k++)
            h.w[k] = mq_ld4<4>(b + 4 + 4 * k);
    }
    /* quant_k4_scale_min on the words: byte i of the scales is byte i % 4
     * of word i / 4 */
    MQ_HD static void factors(const hdr &h, const uint8_t *, int s, float &a, float &m) {
        const int sh = 8 * (s & 3);
        const uint32_t b0 = (h.w[0] >> sh) & 0xFF, b1 = (h.w[1] >> sh) & 0xFF, b2 = (h.w[2] >> sh) & 0xFF;
        const int sc = s < 4 ? (int)(b0 & 63) : (int)((b2 & 0xF) | (b0 >> 6) << 4);
        const int mn = s < 4 ? (int)(b1 & 63) : (int)((b2 >> 4) | (b1 >> 6) << 4);
        a = h.d * (float)sc;
        m = -(h.dmin * (float)mn);
    }
};
template <> struct mq<CLEAVE_TYPE_Q4_K> : mq_k45<CLEAVE_TYPE_Q4_K> {};
template <> struct mq<CLEAVE_TYPE_Q5_K> : mq_k45<CLEAVE_TYPE_Q5_K> {};

/* IQ4_XS: group s is an IQ4_NL block's quants at qs byte 16 s; its scale
 * is six bits, four in scales_l, two in scales_h */
template <> struct mq<CLEAVE_TYPE_IQ4_XS> {
    static constexpr int QK = 256, G = 32, NG = 8, BLK = cq_fmt<CLEAVE_TYPE_IQ4_XS>::BLK, ZERO = 0,
                         AL = 4;
    static constexpr bool PAIRED = true;
    MQ_HD static void quads(const uint8_t *b, int p, uint32_t &lo, uint32_t &hi) {
        mq_iq4(mq_ld4<4>(b + 8 + 16 * (p >> 5) + (p & 15)), lo, hi);
    }
    MQ_HD static uint32_t quad(const uint8_t *b, int p) { return mq_quad<mq>(b, p); }
    MQ_HD static void factors(const uint8_t *b, int s, float &a, float &m) {
        int sh = b[2] | b[3] << 8;
        int ls = (((b[4 + s / 2] >> (4 * (s % 2))) & 0xF) | (((sh >> (2 * s)) & 3) << 4)) - 32;
        a = cq_f16(b) * (float)ls;
        m = 0.0f;
    }
    MQ_PLAIN_HDR
};

/* ---- one scale per 16 ------------------------------------------------------ */

/* Q6_K: position p is half h = p / 128, quarter g = (p % 128) / 32, l =
 * p % 32: ql byte 64 h + 32 (g % 2) + l, nibble g / 2, and two bits 2 g
 * of qh byte 32 h + l; group = p / 16 indexes the int8 scales */
template <> struct mq<CLEAVE_TYPE_Q6_K> {
    static constexpr int QK = 256, G = 16, NG = 16, BLK = cq_fmt<CLEAVE_TYPE_Q6_K>::BLK, ZERO = 32,
                         AL = 2;
    static constexpr bool PAIRED = false;
    MQ_HD static uint32_t quad(const uint8_t *b, int p) {
        const int h = p >> 7, g = (p >> 5) & 3, l = p & 31;
        uint32_t q = mq_nib(mq_ld4<2>(b + 64 * h + 32 * (g & 1) + l), g >> 1);
        return q | ((mq_ld4<2>(b + 128 + 32 * h + l) >> (2 * g)) & 0x03030303u) << 4;
    }
    MQ_HD static void factors(const uint8_t *b, int k, float &a, float &m) {
        a = cq_f16(b + 208) * (float)(int8_t)b[192 + k];
        m = 0.0f;
    }
    /* d and the 16 int8 scales as four words */
    struct hdr {
        float d;
        uint32_t w[4];
    };
    MQ_HD static void head(const uint8_t *b, hdr &h) {
        h.d = cq_f16(b + 208);
        for (int k = 0; k < 4; k++)
            h.w[k] = mq_ld4<2>(b + 192 + 4 * k);
    }
    MQ_HD static void factors(const hdr &h, const uint8_t *, int k, float &a, float &m) {
        a = h.d * (float)(int8_t)(uint8_t)(h.w[k >> 2] >> (8 * (k & 3)));
        m = 0.0f;
    }
};

/* Q2_K, Q3_K: position p is half j = p / 128, shift s = (p % 128) / 32,
 * l = p % 32: two bits 2 s of qs byte 32 j + l; Q3_K's third bit is bit
 * 4 j + s of hmask byte l (set: no -4). Group = p / 16 indexes the scales. */
template <int T> struct mq_k23 {
    static constexpr int QK = 256, G = 16, NG = 16, BLK = cq_fmt<T>::BLK;
    static constexpr bool Q3 = T == CLEAVE_TYPE_Q3_K, PAIRED = false;
    static constexpr int ZERO = Q3 ? 4 : 0, AL = Q3 ? 2 : 4;
    MQ_HD static uint32_t quad(const uint8_t *b, int p) {
        const int j = p >> 7, s = (p >> 5) & 3, l = p & 31;
        uint32_t q = (mq_ld4<AL>(b + (Q3 ? 32 : 16) + 32 * j + l) >> (2 * s)) & 0x03030303u;
        if constexpr (Q3) q |= ((mq_ld4<AL>(b + l) >> (4 * j + s)) & 0x01010101u) << 2;
        return q;
    }
    MQ_HD static void factors(const uint8_t *b, int k, float &a, float &m) {
        if constexpr (Q3) {
            a = cq_f16(b + 108) * (float)cq_q3_scale(k, b + 96);
            m = 0.0f;
        } else {
            a = cq_f16(b + 80) * (float)(b[k] & 0xF);
            m = -(cq_f16(b + 82) * (float)(b[k] >> 4));
        }
    }
    MQ_PLAIN_HDR
};
template <> struct mq<CLEAVE_TYPE_Q2_K> : mq_k23<CLEAVE_TYPE_Q2_K> {};
template <> struct mq<CLEAVE_TYPE_Q3_K> : mq_k23<CLEAVE_TYPE_Q3_K> {};

#endif
