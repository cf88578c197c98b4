/* The per-call half of RoPE scaling: checks the parameters and finds the
 * YaRN correction dims and magnitude scale (YaRN paper, section 3; the
 * formulas ggml's rope_yarn_corr_dims uses), so kernels only blend. */
#include "backend/rope.h"

#include "base/error.h"

/* The pair index at which the rotation makes n_rotations turns over the
 * original context: solving n_ctx_orig / (2 pi base^(2i/n_rot)) = n_rotations
 * for i. */
static double corr_dim(size_t n_rot, uint32_t n_ctx_orig, double n_rotations, double base) {
    const double two_pi = 6.283185307179586;
    return (double)n_rot * log((double)n_ctx_orig / (n_rotations * two_pi)) / (2.0 * log(base));
}

cleave_status be_rope_prepare(const be_rope *p, be_rope_prep *o) {
    *o = (be_rope_prep){1.0, 0.0, 0.0, 0.0, 1.0f};
    const be_rope_scaling *s = p->scaling;
    if (!s) return CLEAVE_OK;
    if (!(s->freq_scale > 0) || !isfinite(s->freq_scale) || !isfinite(s->ext_factor) ||
        !(s->attn_factor > 0) || !isfinite(s->attn_factor))
        return err_set(CLEAVE_ERR_INVALID_ARG,
                       "rope: scaling freq_scale %g, ext_factor %g, attn_factor %g",
                       (double)s->freq_scale, (double)s->ext_factor, (double)s->attn_factor);
    o->freq_scale = s->freq_scale;
    o->ext_factor = s->ext_factor;
    double m = s->attn_factor;
    if (s->ext_factor != 0) {
        if (!s->n_ctx_orig || !(s->beta_fast > 0) || !(s->beta_slow > 0) || p->freq_base == 1.0f)
            return err_set(CLEAVE_ERR_INVALID_ARG,
                           "rope: YaRN needs an original context (%u), positive betas (%g, %g) and "
                           "a base other "
                           "than 1 (%g)",
                           s->n_ctx_orig, (double)s->beta_fast, (double)s->beta_slow,
                           (double)p->freq_base);
        /* attention entropy grows with the interpolated length: cos and sin
         * gain 0.1 ln(factor) */
        m *= 1.0 + 0.1 * log(1.0 / (double)s->freq_scale);
        double lo = floor(corr_dim(p->n_rot, s->n_ctx_orig, s->beta_fast, p->freq_base));
        double hi = ceil(corr_dim(p->n_rot, s->n_ctx_orig, s->beta_slow, p->freq_base));
        o->corr_lo = lo > 0 ? lo : 0;
        o->corr_hi = hi < (double)p->n_rot - 1 ? hi : (double)p->n_rot - 1;
    }
    o->mscale = (float)m;
    return CLEAVE_OK;
}
