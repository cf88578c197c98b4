/* Layer-split prefill as a pipeline: the pass is cut into micro-batches of
 * n_ubatch tokens and each device (a stage: its contiguous layers) runs on
 * its own host thread, so device d works on micro-batch u + 1 while device
 * d + 1 works on micro-batch u, the way llama.cpp's pipeline parallelism
 * keeps both GPUs busy on a long prompt.
 *
 * Micro-batch u uses rows [u * ub, ...) of every device's x, h and input
 * arrays, so stages never share a row; the other scratch buffers are
 * temporaries each stage uses for one micro-batch at a time. Stage k hands
 * a micro-batch's x and h rows to stage k + 1 and bumps a counter under a
 * mutex. Between devices with copy_from (GPUs: a peer copy, or staged
 * through pinned memory) stage k only records an event after issuing the
 * micro-batch, and stage k + 1 issues a copy that waits for that event:
 * neither host thread waits for a device, so the devices overlap however
 * far ahead the threads run. Otherwise the rows go through host memory
 * (one region per boundary and micro-batch, never reused within the
 * pass). Attention of micro-batch u may see the cells of
 * later micro-batches in the cell table; their positions are later, so the
 * causal mask hides them. The first failure stops every stage and its
 * message is reported by the caller's thread. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"
#include "base/error.h"
#include "base/mem.h"

typedef struct pipeline pipeline;

typedef struct stage {
    pipeline *p;
    size_t k;       /* position in the pipeline */
    int dev;
    uint32_t l0, l1; /* its layers */
} stage;

struct pipeline {
    placement *pl;
    size_t n, ub, n_micro, first_out, n_stages;
    stage st[CLEAVE_MAX_DEVICES];
    float *slots;                  /* [n_stages - 1][2][n][n_embd]: x rows, then h rows */
    bool direct;                   /* devices copy between themselves (copy_from) */
    void **events;                 /* [n_stages - 1][n_micro]: micro-batch issued */
    size_t done[CLEAVE_MAX_DEVICES]; /* micro-batches stage k has handed on */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool failed;
    cleave_status code;
    char msg[512];
};

static void fail(pipeline *p, cleave_status st) {
    pthread_mutex_lock(&p->mu);
    if (!p->failed) {
        p->failed = true;
        p->code = st;
        snprintf(p->msg, sizeof p->msg, "%s", cleave_last_error());
    }
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

/* Waits until stage k has handed on micro-batch u; false if the pass failed. */
static bool wait_for(pipeline *p, size_t k, size_t u) {
    pthread_mutex_lock(&p->mu);
    while (!p->failed && p->done[k] <= u) pthread_cond_wait(&p->cv, &p->mu);
    bool ok = !p->failed;
    pthread_mutex_unlock(&p->mu);
    return ok;
}

static bool has_failed(pipeline *p) {
    pthread_mutex_lock(&p->mu);
    bool f = p->failed;
    pthread_mutex_unlock(&p->mu);
    return f;
}

static void handed_on(pipeline *p, size_t k, size_t u) {
    pthread_mutex_lock(&p->mu);
    p->done[k] = u + 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

static float *slot(pipeline *p, size_t boundary, bool h, size_t row) {
    size_t e = p->pl->model->hp.n_embd;
    return p->slots + ((boundary * 2 + (h ? 1 : 0)) * p->n + row) * e;
}

/* Micro-batch u through stage S; a status on failure. */
static cleave_status run_micro(stage *S, size_t u) {
    pipeline *p = S->p;
    placement *pl = p->pl;
    const model_hparams *hp = &pl->model->hp;
    engine_device *D = &pl->devs[S->dev];
    be_device *d = D->dev;
    size_t e = hp->n_embd, off = u * p->ub, m = p->n - off < p->ub ? p->n - off : p->ub;
    size_t bytes = m * e * sizeof(float);
    engine_scratch v = D->s; /* this micro-batch's rows */
    v.x += off * e, v.h += off * e, v.pos += off, v.seq += off, v.cells += off, v.win += 2 * off;
    cleave_status st;
    if (S->k == 0) {
        if ((st = be_get_rows(d, &pl->tok_embd, D->s.ids + off, m, v.x))) return st;
        if ((st = be_rms_norm(d, v.x, pl->layers[S->l0].attn_norm, v.h, m, e, hp->norm_eps)))
            return st;
    } else if (p->direct) {
        if (!wait_for(p, S->k - 1, u)) return CLEAVE_OK; /* another stage failed */
        const stage *P = &p->st[S->k - 1];
        engine_scratch *ps = &pl->devs[P->dev].s;
        void *ready = p->events[(S->k - 1) * p->n_micro + u];
        if ((st = engine_transfer(pl, S->dev, v.x, P->dev, ps->x + off * e, bytes, ready)) ||
            (st = engine_transfer(pl, S->dev, v.h, P->dev, ps->h + off * e, bytes, ready)))
            return st;
    } else {
        if (!wait_for(p, S->k - 1, u)) return CLEAVE_OK; /* another stage failed */
        if ((st = be_write(d, v.x, slot(p, S->k - 1, false, off), bytes)) ||
            (st = be_write(d, v.h, slot(p, S->k - 1, true, off), bytes)))
            return st;
    }
    for (uint32_t l = S->l0; l < S->l1; l++)
        if ((st = engine_forward_layer(pl, &v, l, m, false))) return st;
    if (S->k + 1 < p->n_stages && p->direct) {
        /* the rows stay where they are until the next stage copies them */
        if ((st = be_event_record(d, &p->events[S->k * p->n_micro + u]))) return st;
        handed_on(p, S->k, u);
        return CLEAVE_OK;
    }
    if (S->k + 1 < p->n_stages) {
        /* read is synchronous: the rows are final when it returns */
        if ((st = be_read(d, slot(p, S->k, false, off), v.x, bytes)) ||
            (st = be_read(d, slot(p, S->k, true, off), v.h, bytes)))
            return st;
        handed_on(p, S->k, u);
        return CLEAVE_OK;
    }
    /* the last stage: logits of this micro-batch's rows that are wanted */
    size_t r0 = off > p->first_out ? off : p->first_out, r1 = off + m;
    if (r0 >= r1) return CLEAVE_OK;
    return be_matmul(d, &pl->output, D->s.h + r0 * e, r1 - r0, NULL,
                          D->s.logits + (r0 - p->first_out) * hp->n_vocab);
}

static void *stage_main(void *arg) {
    stage *S = arg;
    for (size_t u = 0; u < S->p->n_micro; u++) {
        cleave_status st = run_micro(S, u);
        if (st) {
            fail(S->p, st);
            break;
        }
        if (has_failed(S->p)) break;
    }
    return NULL;
}

cleave_status engine_pipeline_forward(placement *pl, size_t n, size_t first_out) {
    const model_hparams *hp = &pl->model->hp;
    pipeline *p = mem_calloc(1, sizeof *p, "pipeline");
    if (!p) return CLEAVE_ERR_OOM;
    p->pl = pl, p->n = n, p->ub = pl->n_ubatch, p->first_out = first_out;
    /* uniform micro-batches: measured on 2x H200 (8B bf16, pp4096, -ub 512)
     * at 51.3k tok/s, against 50.1k with a half-size first one (to fill
     * the pipeline sooner) and 47.7k with quarter-size ends and equal
     * 480-token pieces between: odd GEMM shapes cost more than the
     * shorter fill and drain save */
    p->n_micro = (n + p->ub - 1) / p->ub;
    /* stages: runs of layers on one device, in layer order */
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        int d = pl->layers[l].dev;
        if (!p->n_stages || p->st[p->n_stages - 1].dev != d) {
            stage *S = &p->st[p->n_stages];
            S->p = p, S->k = p->n_stages, S->dev = d, S->l0 = l;
            p->n_stages++;
        }
        p->st[p->n_stages - 1].l1 = l + 1;
    }
    cleave_status st = CLEAVE_OK;
    p->direct = !pl->host_handoff;
    for (size_t k = 1; k < p->n_stages; k++) {
        const be_device *a = pl->devs[p->st[k - 1].dev].dev, *b = pl->devs[p->st[k].dev].dev;
        p->direct &= be_same_backend(a, b) && be_has(b, BE_CAP_PEER) && be_has(a, BE_CAP_PEER);
    }
    if (p->direct) {
        p->events = mem_calloc((p->n_stages - 1) * p->n_micro, sizeof *p->events, "pipeline events");
        if (!p->events) st = CLEAVE_ERR_OOM;
    } else {
        p->slots = mem_alloc((p->n_stages - 1) * 2 * n * hp->n_embd * sizeof(float),
                             "pipeline handoff");
        if (!p->slots) st = CLEAVE_ERR_OOM;
    }
    pthread_t th[CLEAVE_MAX_DEVICES];
    size_t started = 0;
    if (!st) {
        pthread_mutex_init(&p->mu, NULL);
        pthread_cond_init(&p->cv, NULL);
        for (; started < p->n_stages; started++)
            if (pthread_create(&th[started], NULL, stage_main, &p->st[started])) {
                st = err_set(CLEAVE_ERR_OOM, "pipeline: cannot start a thread for stage %zu", started);
                fail(p, st);
                break;
            }
        for (size_t k = 0; k < started; k++) pthread_join(th[k], NULL);
        pthread_cond_destroy(&p->cv);
        pthread_mutex_destroy(&p->mu);
        if (!st && p->failed) st = err_set(p->code, "%s", p->msg);
    }
    /* every copy that waits on an event has been issued; devices hold on
     * to what they still need until they sync */
    for (size_t k = 0; p->events && k + 1 < p->n_stages; k++) {
        be_device *d = pl->devs[p->st[k].dev].dev;
        for (size_t u = 0; u < p->n_micro; u++)
            if (p->events[k * p->n_micro + u]) be_event_free(d, p->events[k * p->n_micro + u]);
    }
    free(p->events);
    free(p->slots);
    free(p);
    return st;
}
