/* launcher: the steps of a NodeClaim's launch as a table (from the state a claim is in, the action done from it
 * and the state it leads to), and launcher_reconcile, which runs the table on one claim as far as it goes. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "launcher_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "kube_object.h"

#define MAX_STEPS 32            /* actions of one pass, at most */
#define REQUEUE_RESTARTED_MS 100 /* the pause when a claim kept changing under the reconcile */

/* The step table. An action's DONE takes the claim to next: written at once, or with the next write when next is
 * deferred (Configured). An action that ends elsewhere records that state itself and answers MOVED: a VMID
 * taken by someone else (back to Reserved), a clone task Proxmox forgot (back to VMIDAllocated), a Node ready when
 * it is found (on to Initialized). Reserved is recorded alone only when no VMID could be picked right after the
 * reservation, Cloning only when the clone still runs after LAUNCHER__CLONE_INLINE_MS, Started only when the bind
 * has to wait. */
static const struct transition {
        enum nodeclaim_step state; /* the state the claim is in */
        launcher__action action;   /* what is done from it */
        enum nodeclaim_step next;  /* the state the action leads to */
} TRANSITIONS[] = {
        { NODECLAIM_STEP_NONE, launcher__reserve, NODECLAIM_STEP_VMID_ALLOCATED },
        { NODECLAIM_STEP_RESERVED, launcher__allocate_vmid, NODECLAIM_STEP_VMID_ALLOCATED },
        { NODECLAIM_STEP_VMID_ALLOCATED, launcher__clone, NODECLAIM_STEP_CONFIGURED },
        { NODECLAIM_STEP_CLONING, launcher__await_clone, NODECLAIM_STEP_CONFIGURED },
        { NODECLAIM_STEP_CONFIGURED, launcher__start, NODECLAIM_STEP_LAUNCHED },
        { NODECLAIM_STEP_STARTED, launcher__bind, NODECLAIM_STEP_LAUNCHED },
        { NODECLAIM_STEP_LAUNCHED, launcher__register, NODECLAIM_STEP_REGISTERED },
        { NODECLAIM_STEP_REGISTERED, launcher__initialize, NODECLAIM_STEP_INITIALIZED },
};

static const struct transition *transition_from(enum nodeclaim_step state) {
        for (size_t i = 0; i < sizeof TRANSITIONS / sizeof TRANSITIONS[0]; i++)
                if (TRANSITIONS[i].state == state)
                        return &TRANSITIONS[i];
        return NULL;
}

/* The action is done: the claim goes on to next. */
static struct launchstep_result advance(struct launcher__ctx *c, enum nodeclaim_step next) {
        if (!launchstep_deferred(next))
                return launcher__record(c, next);
        launcher__defer(c, next);
        return launchstep_done();
}

/* A step failed with a (probably transient) error: count it, and fail the launch after too many. */
static struct launchstep_result step_error(struct launcher__ctx *c, const struct launchstep_result *res) {
        struct launchstep_retry retry = launchstep_retry(c->st->attempts);
        const char *at = nodeclaim_step_name(c->st->launch_step);
        char message[NODECLAIM_MESSAGE_MAX];
        snprintf(message, sizeof message, "%s", res->message[0] ? res->message : strerror(-res->err));
        log_error("launcher: NodeClaim %s after %s (attempt %lld): %s", c->name, at[0] ? at : "start",
                  (long long)retry.attempts, message);
        if (retry.give_up || launchstep_refused(message)) {
                struct launchstep_result why =
                        launchstep_fail(retry.give_up ? "LaunchFailed" : LAUNCHSTEP_REFUSED_REASON, "%s", message);
                return launcher__fail(c, &why);
        }
        launchstep_attempt_failed(c->st, retry.attempts, message);
        return launchstep_then(launcher__commit(c), launchstep_wait(retry.requeue_ms));
}

/* An action ended short of its next state: what it changed and did not write is dropped. */
static struct launchstep_result stopped(struct launcher__ctx *c, struct launchstep_result res) {
        launcher__rollback(c);
        if (res.kind == LAUNCHSTEP_WAIT || launchstep_is_error(&res, -EAGAIN))
                return res;
        if (res.kind == LAUNCHSTEP_FAIL)
                return launcher__fail(c, &res);
        if (res.err == -ECANCELED || kube_client_canceled(c->kube)) {
                res.err = -ECANCELED; /* a stop: the claim goes on from its status at the next start */
                return res;
        }
        return step_error(c, &res);
}

static struct launchstep_result run_steps(struct launcher__ctx *c) {
        for (unsigned i = 0; i < MAX_STEPS; i++) {
                enum nodeclaim_step at = launcher__ctx_step(c);
                if (at == NODECLAIM_STEP_INITIALIZED)
                        return launchstep_done();
                const struct transition *t = transition_from(at);
                if (!t) {
                        struct launchstep_result why = launchstep_fail(
                                "InvalidNodeClaim", "status.launchStep: unknown step \"%s\"", nodeclaim_step_name(at));
                        return launcher__fail(c, &why);
                }
                struct launchstep_result res = t->action(c);
                if (res.kind == LAUNCHSTEP_DONE)
                        res = advance(c, t->next);
                if (res.kind != LAUNCHSTEP_DONE && res.kind != LAUNCHSTEP_MOVED)
                        return stopped(c, res);
        }
        return launchstep_wait(1);
}

/* ---- one reconcile ---- */

static void copy_str(char *dst, size_t len, const char *src) {
        snprintf(dst, len, "%s", src ? src : "");
}

/* Identity and location from the claim (status first, then the zone/region requirements). */
static void ctx_identify(struct launcher__ctx *c) {
        const json_t *meta = json_object_get(c->claim, "metadata");
        copy_str(c->name, sizeof c->name, json_string_value(json_object_get(meta, "name")));
        copy_str(c->uid, sizeof c->uid, json_string_value(json_object_get(meta, "uid")));
        copy_str(c->region, sizeof c->region, c->st->region[0] ? c->st->region : nodeclaim_region(c->claim));
        copy_str(c->host, sizeof c->host, c->st->host[0] ? c->st->host : nodeclaim_host(c->claim));
        copy_str(c->nodepool, sizeof c->nodepool,
                 kube_nodeclaim_of(c->claim).node_pool);
}

static void ctx_clients(struct launcher__ctx *c) {
        const struct launcher_env *e = &c->l->env;
        c->pve = c->region[0] ? e->pve_for_region(e->userdata, c->region) : NULL;
        c->agent = c->region[0] && c->host[0] && e->agent_for_host ? e->agent_for_host(e->userdata, c->region, c->host)
                                                                    : NULL;
}

/* Why a claim cannot be launched (launchstep_todo said so). */
static struct launchstep_result invalid(const struct launcher__ctx *c, bool placed) {
        if (!placed)
                return launchstep_fail("InvalidNodeClaim",
                                       "status.host and status.region (or zone/region requirements) required");
        return launchstep_fail("InvalidNodeClaim", "%s", c->status_error);
}

static struct launchstep_result reconcile_once(struct launcher__ctx *c) {
        ctx_identify(c);
        ctx_clients(c);
        if (!c->name[0] || !c->uid[0])
                return launchstep_error(-EINVAL, "%s", strerror(EINVAL));
        bool placed = c->host[0] && c->region[0];
        bool valid = !c->status_error[0];
        enum launchstep_todo todo = launchstep_todo(c->st->launch_step, kube_deleting(c->claim), placed, valid);
        if (todo == LAUNCHSTEP_TODO_FINALIZE)
                return launcher__finalize(c);
        if (todo == LAUNCHSTEP_TODO_NOTHING)
                return launchstep_done();
        struct launchstep_result res = launcher__ensure_finalizer(c);
        if (!launchstep_ok(&res))
                return res;
        if (todo == LAUNCHSTEP_TODO_FAILED)
                return launcher__fail(c, NULL);
        if (todo == LAUNCHSTEP_TODO_INVALID) {
                res = invalid(c, placed);
                return launcher__fail(c, &res);
        }
        return run_steps(c);
}

/* Passes of reconcile_once, as long as the claim changes under them (at most LAUNCHER__MAX_RESTARTS). */
static struct launchstep_result reconcile_passes(struct launcher__ctx *c) {
        for (unsigned i = 0;; i++) {
                c->now = launcher__now(c->l);
                struct launchstep_result res = reconcile_once(c);
                launcher__ctx_drop(c);
                if (!launchstep_is_error(&res, -EAGAIN) || i + 1 >= LAUNCHER__MAX_RESTARTS)
                        return res;
        }
}

static const char *claim_rv(const json_t *claim) {
        return kube_meta_of(claim).resource_version;
}

/* A claim's reconcile error is logged when it starts, when its message changes and when it ends (a drain refused
 * by RBAC, say, is tried every few seconds): how many in a row so far, 0 when the message is new (log it), or the
 * count that just ended when message is NULL (a success). */
static long long note_failure(struct launcher *l, const char *name, const char *message) {
        pthread_mutex_lock(&l->mu);
        json_t *f = json_object_get(l->failing, name);
        const char *last = json_string_value(json_object_get(f, "message"));
        long long n = json_integer_value(json_object_get(f, "n"));
        if (!message)
                json_object_del(l->failing, name);
        else if (last && strcmp(last, message) == 0)
                json_object_set_new(f, "n", json_integer(++n));
        else {
                json_object_set_new(l->failing, name, json_pack("{s:s, s:i}", "message", message, "n", 1));
                n = 0;
        }
        pthread_mutex_unlock(&l->mu);
        return n;
}

static void log_failure_of(struct launcher *l, const char *name, const char *message) {
        long long n = note_failure(l, name, message);
        if (n == 0)
                log_error("launcher: NodeClaim %s: %s", name, message);
        else
                log_debug("launcher: NodeClaim %s: %s (again: %lld in a row)", name, message, n);
}

static void log_failure(const struct launcher__ctx *c, const char *message) {
        log_failure_of(c->l, c->name, message);
}

/* A failed read of the claim itself, logged as its other failures are: once per change. Returns r. */
static int log_read_failure(struct launcher *l, const char *name, struct kube_client *kube, int r) {
        char message[512];
        snprintf(message, sizeof message, "GET NodeClaim: %s", kube_client_error(kube));
        if (name)
                log_failure_of(l, name, message);
        else
                log_error_errno(r, "launcher: GET NodeClaim ?: %s", kube_client_error(kube));
        return r;
}

/* The claim as the API server has it now: the caller's copy may lag behind our own last status write, and a
 * step must never run twice from an old status. The caller's copy will do when it is our last write (a newer
 * write by someone else would fail ours with a conflict), and when this process has not begun the launch: what
 * comes before the first write (the agent's reservation, keyed by the claim, and reading the next free VMID) can
 * be done twice, and that write fails if the copy is old. NULL (with *ret_err 0) when the claim is gone. */
static json_t *fresh_claim(struct launcher *l, struct kube_client *kube, const json_t *claim, int *ret_err) {
        const json_t *meta = json_object_get(claim, "metadata");
        const char *name = json_string_value(json_object_get(meta, "name"));
        enum nodeclaim_step step = nodeclaim_claim_step(claim);
        bool deleting = kube_deleting(claim);
        json_t *fresh = NULL;
        *ret_err = 0;
        if (!deleting && step == NODECLAIM_STEP_INITIALIZED)
                return json_incref((json_t *)claim); /* nothing left to do but notice a deletion (an update) */
        /* A copy that is one of our writes: our last write is newer, or the same. */
        if (!deleting && launcher__wrote(l, name, claim_rv(claim), &fresh) && fresh)
                return fresh;
        if (!deleting && step == NODECLAIM_STEP_NONE && nodeclaim_host(claim) && !launcher__wrote_any(l, name))
                return json_incref((json_t *)claim); /* placed, not begun: the first write fails on an old copy */
        int r = name ? kube_get(kube, &kube_nodeclaims, NULL, name, &fresh) : -EINVAL;
        if (r == -ENOENT)
                launcher__note_written(l, name, NULL);
        if (r == -ECANCELED)
                *ret_err = r;
        else if (r < 0 && r != -ENOENT)
                *ret_err = log_read_failure(l, name, kube, r);
        return fresh;
}

static void log_recovery(const struct launcher__ctx *c) {
        long long n = note_failure(c->l, c->name, NULL);
        if (n > 0)
                log_info("launcher: NodeClaim %s: goes on after %lld failed attempts", c->name, n);
}

/* What launcher_reconcile answers for a result: 0 with the requeue time, or a negative errno (logged here). */
static int answer(const struct launcher__ctx *c, const struct launchstep_result *res, int64_t *ret_requeue_ms) {
        const char *message = res->message[0] ? res->message : NULL;
        *ret_requeue_ms = res->kind == LAUNCHSTEP_WAIT ? res->requeue_ms : 0;
        if (res->kind != LAUNCHSTEP_ERROR || (res->err == -ENOENT && !message)) { /* -ENOENT alone: the claim is gone */
                log_recovery(c);
                return 0;
        }
        if (res->err == -EAGAIN) {
                *ret_requeue_ms = REQUEUE_RESTARTED_MS;
                return 0;
        }
        if (res->err == -ECANCELED)
                log_debug("launcher: NodeClaim %s: stopped (%s)", c->name, message ? message : "canceled");
        else
                log_failure(c, message ? message : strerror(-res->err));
        return res->err;
}

static void account_waits(struct launcher__ctx *c) {
        struct latency_waits spent;
        if (!c->timed)
                return;
        latency_waits_since(&c->waits0, &spent);
        latency_add_wait(c->l->env.latency, c->name, &spent);
}

int launcher_reconcile(struct launcher *l, const json_t *claim, int64_t *ret_requeue_ms) {
        struct launcher__ctx c = { .l = l };
        int64_t requeue;
        int r;
        c.kube = l->env.kube_for_thread ? l->env.kube_for_thread(l->env.userdata) : l->env.kube;
        if (!c.kube)
                return -EINVAL;
        c.timed = l->env.latency != NULL; /* the claim may be begun while this reconcile runs: decided at its end */
        if (c.timed)
                latency_waits_now(&c.waits0);
        json_t *fresh = fresh_claim(l, c.kube, claim, &r);
        if (!fresh) {
                if (r == 0)
                        *ret_requeue_ms = 0; /* gone */
                return r;
        }
        if ((r = launcher__ctx_take(&c, fresh)) < 0)
                return r;
        struct launchstep_result res = reconcile_passes(&c);
        launcher__unpick_vmid(&c);
        launcher__addresses_unhold(&c); /* recorded on the claim by now, or not chosen after all */
        account_waits(&c);
        r = answer(&c, &res, &requeue);
        launcher__ctx_done(&c);
        if (r < 0)
                return r;
        *ret_requeue_ms = requeue;
        return 0;
}
