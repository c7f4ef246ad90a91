/* plan_async.c - asynchronous scheduling: two steps in flight, output
 * placeholders, requests freed when their output is processed. */
#include "slot/plan_impl.h"

/* ---- asynchronous scheduling ----------------------------------------------
 * vLLM's engine with async scheduling keeps two steps in flight: it
 * schedules step k+1, then processes step k's output (its batch queue of
 * two).  The scheduler advances num_computed_tokens when it schedules, and
 * a step that samples leaves an output placeholder, resolved when its
 * output is processed.  Requests that finish in step k are freed only
 * then, after step k+1 was scheduled. */

/* A request finishes when its output is processed: its blocks return to
 * the pool (it holds none if it was preempted) and it leaves the queues. */
static void finish_async(struct kv_plan *s, int64_t id)
{
    struct req *r = &s->reqs[id];

    if (r->state == ST_PREEMPTED)
        ring_remove(&s->waitq, id);
    r->state = ST_FINISHED;
    plan_free_blocks(s, id);
    s->n_finished_total++;
}

/* The step in flight's output (update_from_output): each request that
 * sampled gets its token; a token of a step scheduled before the request
 * was preempted is stale: delivered, but it resolves no placeholder. */
static void update_async(struct kv_plan *s)
{
    size_t keep = 0;

    for (size_t k = 0; k < s->n_pending; k++) {
        int64_t id = s->p_ids[k];
        struct req *r = &s->reqs[id];
        int stale = 0;

        r->inflight -= s->p_sched[k];
        if (r->stale > 0) {
            stale = 1;
            r->stale -= s->p_sched[k];
        }
        if (r->state == ST_FINISHED || !s->p_samples[k])
            continue;
        r->n_out++;
        if (!stale && r->ph > 0) {
            r->ph--;
            /* the blocks its known tokens fill, now that the token is */
            if (s->apc && r->state == ST_RUNNING)
                plan_cache_upto(s, id, r->computed - r->inflight);
        }
        if (num_tokens(r) >= s->mml || r->n_out >= r->out_max)
            finish_async(s, id);
    }
    for (size_t k = 0; k < s->n_running; k++)
        if (s->reqs[s->running[k]].state != ST_FINISHED)
            s->running[keep++] = s->running[k];
    s->n_running = keep;
    s->n_pending = 0;
    s->has_pending = 0;
}

/* After scheduling (_update_after_schedule): computed tokens advance now,
 * a step that samples adds a placeholder; a request whose last token this
 * step samples is reported finished with this step (it is freed when the
 * step's output is processed).  The step becomes the one in flight. */
static void after_schedule_async(struct kv_plan *s)
{
    s->n_finished = 0;
    for (size_t k = 0; k < s->n_order; k++) {
        int64_t id = s->order[k];
        struct req *r = &s->reqs[id];
        int samples;

        r->computed += r->sched;
        r->inflight += r->sched;
        samples = r->computed >= num_tokens(r) + r->ph;
        s->p_ids[k] = id;
        s->p_sched[k] = r->sched;
        s->p_samples[k] = (unsigned char)samples;
        r->sched = 0;
        if (!samples)
            continue;
        r->ph++;
        if (!r->started) {
            r->started = 1;
            s->n_started++;
        }
        if (!r->ending && (num_tokens(r) + r->ph >= s->mml ||
                           r->n_out + r->ph >= r->out_max)) {
            r->ending = 1;
            s->n_ending++;
            s->o_finished[s->n_finished++] = id;
        }
    }
    /* a step with no rows leaves nothing in flight */
    s->n_pending = s->n_order;
    s->has_pending = s->n_order > 0;
}

/* One step of the asynchronous engine: schedule, write, then process the
 * step in flight before this one.  A scheduling that finds nothing to run
 * (every running request waits for its last token) is a step too: it has
 * no rows and empties the model runner's batch. */
int plan_step_async(struct kv_plan *s, struct kv_plan_step *st,
                    struct kv_err *e)
{
    int64_t budget = s->budget;

    if (s->n_ending == s->n)
        return kv_err_set(e, "every request has finished");
    if (s->n_running == 0 && !s->has_pending && s->waitq.len > 0 &&
        s->reqs[ring_at(&s->waitq, 0)].arrival > s->step + 1)
        s->step = s->reqs[ring_at(&s->waitq, 0)].arrival - 1;
    s->step++;
    s->n_order = s->n_blocked = s->n_preempted = s->n_finished = 0;
    s->n_evicted = s->n_shared = 0;
    plan_schedule_running(s, &budget);
    plan_schedule_waiting(s, &budget);
    if (s->n_order == 0 && !s->has_pending && s->n_preempted == 0)
        return plan_stuck(s, e);
    plan_fill_output(s, st);
    if (s->has_pending)
        update_async(s);
    after_schedule_async(s);
    st->finished = s->o_finished;
    st->n_finished = s->n_finished;
    st->prompts_done = s->n_started == s->n;
    st->all_done = s->n_ending == s->n;
    return 0;
}
