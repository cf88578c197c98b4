/* The type table of every ggml type id and the scalar f16/bf16 conversions
 * the rest of quant/ builds on; row conversions are convert.c. The SIMD
 * paths live in the backends; these are the ground truth they are tested
 * against. */
#include "quant.h"

#include <math.h>
#include <string.h>
#include <strings.h>

typedef struct {
    const char *name;
    size_t block_elems, block_bytes;
} type_row;

/* Indexed by ggml type id; ids ggml retired have no name. */
static const type_row type_table[] = {
    [0] = {"f32", 1, 4},        [1] = {"f16", 1, 2},        [2] = {"q4_0", 32, 18},
    [3] = {"q4_1", 32, 20},     [6] = {"q5_0", 32, 22},     [7] = {"q5_1", 32, 24},
    [8] = {"q8_0", 32, 34},     [9] = {"q8_1", 32, 36},     [10] = {"q2_K", 256, 84},
    [11] = {"q3_K", 256, 110},  [12] = {"q4_K", 256, 144},  [13] = {"q5_K", 256, 176},
    [14] = {"q6_K", 256, 210},  [15] = {"q8_K", 256, 292},  [16] = {"iq2_xxs", 256, 66},
    [17] = {"iq2_xs", 256, 74}, [18] = {"iq3_xxs", 256, 98}, [19] = {"iq1_s", 256, 50},
    [20] = {"iq4_nl", 32, 18},  [21] = {"iq3_s", 256, 110}, [22] = {"iq2_s", 256, 82},
    [23] = {"iq4_xs", 256, 136}, [24] = {"i8", 1, 1},       [25] = {"i16", 1, 2},
    [26] = {"i32", 1, 4},       [27] = {"i64", 1, 8},       [28] = {"f64", 1, 8},
    [29] = {"iq1_m", 256, 56},  [30] = {"bf16", 1, 2},      [34] = {"tq1_0", 256, 54},
    [35] = {"tq2_0", 256, 66},  [39] = {"mxfp4", 32, 17},
};

bool quant_type_info(uint32_t id, const char **name, size_t *block_elems, size_t *block_bytes) {
    if (id >= sizeof type_table / sizeof type_table[0] || !type_table[id].name) return false;
    if (name) *name = type_table[id].name;
    if (block_elems) *block_elems = type_table[id].block_elems;
    if (block_bytes) *block_bytes = type_table[id].block_bytes;
    return true;
}

/* Every type cleave computes with, in the order messages list them. */
static const cleave_type supported_types[] = {
    CLEAVE_TYPE_F32,  CLEAVE_TYPE_F16,  CLEAVE_TYPE_BF16, CLEAVE_TYPE_Q8_0,   CLEAVE_TYPE_Q4_0,
    CLEAVE_TYPE_Q4_1, CLEAVE_TYPE_Q5_0, CLEAVE_TYPE_Q5_1, CLEAVE_TYPE_Q2_K,   CLEAVE_TYPE_Q3_K,
    CLEAVE_TYPE_Q4_K, CLEAVE_TYPE_Q5_K, CLEAVE_TYPE_Q6_K, CLEAVE_TYPE_IQ4_NL, CLEAVE_TYPE_IQ4_XS,
    CLEAVE_TYPE_MXFP4,
};
#define N_SUPPORTED (sizeof supported_types / sizeof supported_types[0])

_Static_assert(sizeof(block_q4_0) == 18 && sizeof(block_q4_1) == 20 && sizeof(block_q5_0) == 22 &&
                   sizeof(block_q5_1) == 24 && sizeof(block_q8_0) == 34 &&
                   sizeof(block_iq4_nl) == 18 && sizeof(block_mxfp4) == 17,
               "legacy block layouts must match ggml's");
_Static_assert(sizeof(block_q2_K) == 84 && sizeof(block_q3_K) == 110 && sizeof(block_q4_K) == 144 &&
                   sizeof(block_q5_K) == 176 && sizeof(block_q6_K) == 210 &&
                   sizeof(block_iq4_xs) == 136,
               "K-quant block layouts must match ggml's");

bool quant_type_supported(uint32_t id) {
    for (size_t i = 0; i < N_SUPPORTED; i++)
        if (id == (uint32_t)supported_types[i]) return true;
    return false;
}

const char *quant_supported_list(void) {
    return "f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_K, q3_K, q4_K, q5_K, q6_K, iq4_nl, "
           "iq4_xs and mxfp4";
}

size_t quant_row_bytes(uint32_t id, size_t n) {
    size_t be, bb;
    if (!quant_type_info(id, NULL, &be, &bb) || n % be) return 0;
    return n / be * bb;
}

const char *cleave_type_name(cleave_type t) {
    const char *name;
    return quant_type_info((uint32_t)t, &name, NULL, NULL) ? name : "?";
}

cleave_status cleave_type_from_name(const char *name, cleave_type *out) {
    for (size_t i = 0; i < N_SUPPORTED; i++) {
        if (name && strcasecmp(name, cleave_type_name(supported_types[i])) == 0) {
            *out = supported_types[i];
            return CLEAVE_OK;
        }
    }
    return CLEAVE_ERR_INVALID_ARG;
}

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float quant_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (man << 13)); /* inf/nan */
    if (exp == 0) {
        if (man == 0) return bits_f32(sign);
        /* subnormal: value = man * 2^-24 */
        float v = (float)man * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t quant_f32_to_f16(float f) {
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t abs = u & 0x7fffffffu;
    if (abs >= 0x7f800000u) /* inf or nan: keep nan-ness */
        return sign | 0x7c00 | (abs > 0x7f800000u ? 0x200 : 0);
    if (abs >= 0x477ff000u) return sign | 0x7c00; /* rounds past 65504: inf */
    if (abs < 0x38800000u) {                      /* below the smallest normal f16 */
        /* scale into the subnormal range and round to nearest even */
        float a = bits_f32(abs) * 16777216.0f; /* 2^24 */
        float r = nearbyintf(a);
        return sign | (uint16_t)r;
    }
    uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u); /* nearest even on the dropped 13 bits */
    return sign | (uint16_t)((rounded - 0x38000000u) >> 13);
}

float quant_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t quant_f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet nan */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
