/* The environment switches (options.h), read once. */
#include "options.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static cleave_env_options opts;
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* Set to anything but "" or "0". */
static bool flag(const char *name) {
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

static long number(const char *name, long fallback) {
    const char *v = getenv(name);
    if (!v || !*v) return fallback;
    char *end;
    long n = strtol(v, &end, 10);
    return *end ? fallback : n;
}

void options_reload(void) {
    opts.load_trace = flag("CLEAVE_LOAD_TRACE");
    opts.step_trace = flag("CLEAVE_STEP_TRACE");
    opts.no_graph = flag("CLEAVE_NO_GRAPH");
    opts.host_handoff = flag("CLEAVE_HOST_HANDOFF");
    opts.no_simd = flag("CLEAVE_NO_SIMD");
    opts.no_p2p = flag("CLEAVE_NO_P2P");
    opts.no_pdl = flag("CLEAVE_NO_PDL");
    const char *attn = getenv("CLEAVE_DECODE_ATTN");
    opts.decode_attn = !attn                  ? OPTIONS_ATTN_AUTO
                       : !strcmp(attn, "mma") ? OPTIONS_ATTN_MMA
                       : !strcmp(attn, "vec") ? OPTIONS_ATTN_VEC
                       : !strcmp(attn, "gqa") ? OPTIONS_ATTN_GQA
                                              : OPTIONS_ATTN_AUTO;
    opts.host_sampling = flag("CLEAVE_HOST_SAMPLING");
    opts.no_map = flag("CLEAVE_NO_MAP");
    opts.no_join = flag("CLEAVE_NO_JOIN");
    opts.no_wgmma = flag("CLEAVE_NO_WGMMA");
    const char *pack = getenv("CLEAVE_GEMVQ_PACK");
    opts.gemvq_pack = !pack                  ? OPTIONS_PACK_AUTO
                      : !strcmp(pack, "0")   ? OPTIONS_PACK_NEVER
                      : !strcmp(pack, "1")   ? OPTIONS_PACK_ALWAYS
                                             : OPTIONS_PACK_AUTO;
    const char *numa = getenv("CLEAVE_TIER_NUMA");
    opts.tier_numa = !(numa && strcmp(numa, "0") == 0);
    const char *nccl = getenv("CLEAVE_NCCL");
    opts.nccl_off = nccl && strcmp(nccl, "0") == 0;
    long mib = number("CLEAVE_HOST_BUDGET_MIB", 0);
    opts.host_budget_mib = mib > 0 ? (size_t)mib : 0;
    opts.gemv_max_n = number("CLEAVE_GEMV_MAX_N", 0);
    opts.gemvq_max_n = number("CLEAVE_GEMVQ_MAX_N", 0);
    opts.moe_gemvq_max_n = number("CLEAVE_MOE_GEMVQ_MAX_N", -1);
    opts.moe_group_max_n = number("CLEAVE_MOE_GROUP_MAX_N", -1);
    opts.moe_mmq_max_n = number("CLEAVE_MOE_MMQ_MAX_N", -1);
    opts.moe_mma_max_n = number("CLEAVE_MOE_MMA_MAX_N", -1);
    opts.upload_threads = number("CLEAVE_UPLOAD_THREADS", -1);
    opts.nccl_min_kb = number("CLEAVE_NCCL_MIN_KB", -1);
}

static void load(void) { options_reload(); }

const cleave_env_options *options_get(void) {
    pthread_once(&once, load);
    return &opts;
}
