/* disruption: the control loop's scale-down pass: decide on one snapshot of the cache (coordinator/disrupt), check
 * the decisions again on a fresh one a pass later, and carry out those that still hold (Events on the NodeClaim and
 * the Node, then the NodeClaim deleted: its finalizer drains the Node and removes the VM); a replace launches its
 * replacement claims first and deletes the old ones once they are Initialized. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "disruption.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kube.h"
#include "launchstep.h"
#include "log.h"
#include "nodeclaim.h"
#include "rfc3339.h"
#include "stats.h"
#include "kube_object.h"

#define COMPONENT "pvescale-coordinator"
#define PLAN_MAX 64    /* decisions kept for the next pass */
#define KEY_MAX 2048   /* "pool|method|claim,claim,..." (pool: the first claim's) */

/* A replace under way: the old claims and the replacements launched to take their place. */
struct replace {
        char *old;              /* the old claims, "a,b" (the replacements' annotation) */
        char **claims;          /* the replacements' names */
        size_t n_claims;
        int64_t started_ms;
        enum stats_disruption_method method;
        char *message;          /* the decision's */
        struct replace *next;
};

struct disruption {
        struct disruption_env env;
        char *plan[PLAN_MAX]; /* the keys of the last pass's decisions, to be carried out when they still hold */
        size_t n_plan;
        json_t *told;         /* claim name -> the last "left alone" message sent as an Event */
        json_t *told_pods;    /* "<pod uid> <value>" -> true: InvalidDoNotDisruptAnnotation Events sent */
        json_t *logged;       /* NodePools' setting errors already logged -> true */
        struct replace *replacing; /* the replaces under way, oldest first */
        size_t n_replacing;
        json_t *tainted;      /* Nodes tainted for a decision whose claims are not yet seen being deleted -> claim */
        json_t *pod_marks;    /* Node -> its pods' signature and last change (disruption_input_pod_events) */
        bool rebuilt;         /* replacing read back from the claims' annotations (once, after start) */
};

int disruption_new(const struct disruption_env *env, struct disruption **ret) {
        struct disruption *d = calloc(1, sizeof *d);
        if (!d)
                return -ENOMEM;
        d->env = *env;
        if (d->env.replace_timeout_ms <= 0)
                d->env.replace_timeout_ms = DISRUPTION_REPLACE_TIMEOUT_MS;
        d->told = json_object();
        d->logged = json_object();
        d->tainted = json_object();
        d->pod_marks = json_object();
        d->told_pods = json_object();
        if (!d->told || !d->logged || !d->tainted || !d->pod_marks || !d->told_pods) {
                disruption_free(d);
                return -ENOMEM;
        }
        *ret = d;
        return 0;
}

static void replace_free(struct replace *r) {
        if (!r)
                return;
        for (size_t i = 0; i < r->n_claims; i++)
                free(r->claims[i]);
        free(r->claims);
        free(r->old);
        free(r->message);
        free(r);
}

static void plan_clear(struct disruption *d) {
        for (size_t i = 0; i < d->n_plan; i++)
                free(d->plan[i]);
        d->n_plan = 0;
}

void disruption_free(struct disruption *d) {
        if (!d)
                return;
        plan_clear(d);
        json_decref(d->told);
        json_decref(d->told_pods);
        while (d->replacing) {
                struct replace *r = d->replacing;
                d->replacing = r->next;
                replace_free(r);
        }
        json_decref(d->logged);
        json_decref(d->tainted);
        json_decref(d->pod_marks);
        free(d);
}

/* ---- decisions as keys ---- */

/* The decision's NodeClaims, "a,b", in the order the decision names them. */
static void claims_list(const struct disruption_input *di, const struct disrupt_decision *dec, char *buf, size_t len) {
        int n = 0;
        buf[0] = '\0';
        for (size_t k = 0; k < dec->n_candidates && n >= 0 && (size_t)n < len; k++)
                n += snprintf(buf + n, len - (size_t)n, "%s%s", k ? "," : "", di->candidates[dec->candidates[k]].claim);
}

/* A decision's identity: its (first candidate's) pool, method and NodeClaims, which may be of several pools. */
static void decision_key(const struct disruption_input *di, const struct disrupt_decision *dec, char *buf,
                         size_t len) {
        int n = snprintf(buf, len, "%s|%s|", di->pools[dec->pool].name, disrupt_method_name(dec->method));
        if (n >= 0 && (size_t)n < len)
                claims_list(di, dec, buf + n, len - (size_t)n);
}

static bool planned(const struct disruption *d, const char *key) {
        for (size_t i = 0; i < d->n_plan; i++)
                if (strcmp(d->plan[i], key) == 0)
                        return true;
        return false;
}

static enum stats_disruption_method stats_method(enum disrupt_method m) {
        switch (m) {
        case DISRUPT_METHOD_EMPTINESS: return STATS_DISRUPTION_EMPTINESS;
        case DISRUPT_METHOD_DRIFT: return STATS_DISRUPTION_DRIFT;
        case DISRUPT_METHOD_EXPIRY: return STATS_DISRUPTION_EXPIRY;
        case DISRUPT_METHOD_REPAIR: return STATS_DISRUPTION_REPAIR;
        case DISRUPT_METHOD_MULTI_NODE: return STATS_DISRUPTION_MULTI_NODE_CONSOLIDATION;
        default: return STATS_DISRUPTION_CONSOLIDATION;
        }
}

/* ---- carrying a decision out ---- */

static void tell(struct disruption *d, const json_t *claim, const json_t *node, const char *type, const char *reason,
                 const char *message) {
        if (kube_event_emit(d->env.kube, &kube_nodeclaims, claim, type, reason, message, COMPONENT) < 0 ||
            (node && kube_event_emit(d->env.kube, &kube_nodes, node, type, reason, message, COMPONENT) < 0))
                log_warning("disruption: cannot record the event \"%s\": %s", message, kube_client_error(d->env.kube));
}

/* Node repair, as Karpenter's: the claim's termination grace period ends now, so that its Node's pods are deleted
 * rather than evicted and waited for (no kubelet may be there to stop them). */
static int end_grace_now(struct disruption *d, const char *name) {
        char now[32];
        json_t *patch = json_pack("{s:{s:{s:s}}}", "metadata", "annotations",
                                  LAUNCHSTEP_ANNOTATION_TERMINATION_TIMESTAMP,
                                  rfc3339_format(rfc3339_now_ms(), now, sizeof now));
        int r = patch ? kube_patch(d->env.kube, &kube_nodeclaims, NULL, name, NULL, KUBE_PATCH_MERGE, patch, NULL)
                      : -ENOMEM;
        json_decref(patch);
        if (r < 0 && r != -ENOENT)
                return log_error_errno(r, "disruption: NodeClaim %s: cannot set its termination timestamp: %s", name,
                                       kube_client_error(d->env.kube));
        return 0;
}

/* Delete a NodeClaim (its finalizer drains and terminates it) with its Events; forceful (repair): its termination
 * grace period over at once. */
static int delete_claim(struct disruption *d, const struct disruption_input *di, const json_t *claim,
                        const json_t *node, const char *message, enum stats_disruption_method m) {
        bool forceful = m == STATS_DISRUPTION_REPAIR;
        const char *name = kube_meta_str(claim, "name");
        struct stats_disruption_labels labels;
        struct kube_delete_options o = KUBE_DELETE_OPTIONS_INIT;
        o.precondition_uid = kube_meta_str(claim, "uid");
        int r = forceful ? end_grace_now(d, name) : 0;
        if (r < 0)
                return r;
        tell(d, claim, node, "Normal", "DisruptionTerminating", message);
        r = kube_delete(d->env.kube, &kube_nodeclaims, NULL, name, &o, NULL);
        if (r < 0 && r != -ENOENT)
                return log_error_errno(r, "disruption: cannot delete NodeClaim %s: %s", name,
                                       kube_client_error(d->env.kube));
        log_info("disruption: NodeClaim %s: %s", name, message);
        size_t pods = disruption_disrupted_labels(di, name, m, &labels);
        stats_nodeclaim_disrupted(d->env.stats, &labels, pods);
        /* Its Node keeps the taint (it was put on for this decision, by this process or by one before a restart): not
         * a stale one to take off, whatever this pass's snapshot, taken before the delete, still says. */
        const char *node_name = kube_meta_str(node, "name");
        if (node_name)
                json_object_set_new(d->tainted, node_name, json_string(name));
        return 0;
}

/* Taint every Node of the decision, then delete its NodeClaims, each with its Events; the Nodes of those that
 * could not be deleted lose the taint. */
static int carry_out(struct disruption *d, const struct disruption_input *di, const struct disrupt_decision *dec) {
        int r = disruption_taint(d->env.kube, d->tainted, di, dec->candidates, dec->n_candidates);
        for (size_t k = 0; r == 0 && k < dec->n_candidates; k++) {
                size_t i = dec->candidates[k];
                r = delete_claim(d, di, di->claims[i], di->nodes[i], dec->message, stats_method(dec->method));
                for (size_t j = k; r < 0 && j < dec->n_candidates; j++)
                        disruption_untaint(d->env.kube, d->tainted, di->nodes[dec->candidates[j]]);
        }
        if (r < 0)
                return r;
        stats_disruption_action(d->env.stats, stats_method(dec->method), STATS_DISRUPTION_DELETE);
        return 0;
}

/* Candidates left alone: an Event each time the reason changes (not every pass). */
static void tell_skips(struct disruption *d, const struct disruption_input *di, const struct disrupt_result *res) {
        for (size_t s = 0; s < res->n_skips; s++) {
                size_t i = res->skips[s].candidate;
                const char *name = di->candidates[i].claim, *msg = res->skips[s].message;
                const char *was = json_string_value(json_object_get(d->told, name));
                if (was && strcmp(was, msg) == 0)
                        continue;
                json_object_set_new(d->told, name, json_string(msg));
                tell(d, di->claims[i], di->nodes[i], "Normal", "DisruptionBlocked", msg);
        }
}

static bool on_candidate(const struct disruption_input *di, const char *node_name) {
        for (size_t i = 0; node_name && i < di->n_candidates; i++)
                if (strcmp(di->candidates[i].sim->name, node_name) == 0)
                        return true;
        return false;
}

/* Karpenter's InvalidDoNotDisruptAnnotation: a pod on one of our nodes whose do-not-disrupt value is neither "true"
 * nor a positive duration is not protected (launchstep_pod_do_not_disrupt), and is told so, once per value. */
static void tell_invalid_do_not_disrupt(struct disruption *d, const struct disruption_input *di) {
        json_t *seen = json_object();
        for (size_t j = 0; seen && j < di->round->in->n_pods; j++) {
                const json_t *pod = di->round->pods[j];
                const char *key_name = NULL, *v = launchstep_pod_do_not_disrupt_invalid(pod, &key_name);
                char key[512], msg[512];
                if (!v || !on_candidate(di, di->round->in->pods[j]->node_name))
                        continue;
                snprintf(key, sizeof key, "%s %s", kube_meta_str(pod, "uid") ?: "", v);
                json_object_set_new(seen, key, json_true());
                if (json_object_get(d->told_pods, key))
                        continue;
                snprintf(msg, sizeof msg, "Invalid %s annotation value \"%s\", ignoring annotation. Use 'true' or a "
                         "duration like '5m', '1h'", key_name, v);
                if (kube_event_emit(d->env.kube, &kube_pods, pod, "Warning", "InvalidDoNotDisruptAnnotation", msg,
                                    COMPONENT) < 0)
                        log_warning("disruption: cannot record the event \"%s\": %s", msg,
                                    kube_client_error(d->env.kube));
        }
        if (!seen)
                return;
        json_decref(d->told_pods);
        d->told_pods = seen;
}

/* ---- replaces: the replacement claims first, the old ones once those are Initialized ---- */

static const json_t *claim_named(const json_t *claims, const char *name) {
        size_t i;
        json_t *c;
        json_array_foreach((json_t *)claims, i, c) {
                const char *n = kube_meta_str(c, "name");
                if (n && name && strcmp(n, name) == 0)
                        return c;
        }
        return NULL;
}

static const json_t *node_of(const struct disruption_input *di, const char *claim) {
        for (size_t i = 0; claim && i < di->n_candidates; i++)
                if (strcmp(di->candidates[i].claim, claim) == 0)
                        return di->nodes[i];
        return NULL;
}

/* Is name one of the comma-separated list? */
static bool listed(const char *list, const char *name) {
        size_t len = strlen(name);
        for (const char *p = list; *p;) {
                size_t n = strcspn(p, ",");
                if (n == len && strncmp(p, name, n) == 0)
                        return true;
                p += n + (p[n] == ',');
        }
        return false;
}

/* The names of a comma-separated list as a JSON array. */
static json_t *names_of(const char *list) {
        json_t *a = json_array();
        for (const char *p = list; a && *p;) {
                size_t n = strcspn(p, ",");
                if (n)
                        json_array_append_new(a, json_stringn(p, n));
                p += n + (p[n] == ',');
        }
        return a;
}

/* Does a claim of the list exist (live: and is not being deleted)? */
static bool any_listed(const json_t *claims, const char *list, bool live) {
        size_t i;
        json_t *c;
        json_array_foreach((json_t *)claims, i, c) {
                const char *n = kube_meta_str(c, "name");
                if (n && listed(list, n) && !(live && kube_deleting(c)))
                        return true;
        }
        return false;
}

static struct replace *replace_new(const char *old, enum stats_disruption_method m, const char *message,
                                   int64_t started_ms) {
        struct replace *r = calloc(1, sizeof *r);
        if (!r)
                return NULL;
        *r = (struct replace){ .old = strdup(old), .started_ms = started_ms, .method = m, .message = strdup(message) };
        if (r->old && r->message)
                return r;
        replace_free(r);
        return NULL;
}

static int replace_add_claim(struct replace *r, const char *name) {
        char **claims = realloc(r->claims, (r->n_claims + 1) * sizeof *claims);
        if (!claims)
                return -ENOMEM;
        r->claims = claims;
        if (!(claims[r->n_claims] = strdup(name)))
                return -ENOMEM;
        r->n_claims++;
        return 0;
}

static struct replace *replace_find(const struct disruption *d, const char *old) {
        for (struct replace *r = d->replacing; r; r = r->next)
                if (strcmp(r->old, old) == 0)
                        return r;
        return NULL;
}

/* r joins the replaces under way, after the others. */
static void replace_add(struct disruption *d, struct replace *r) {
        struct replace **at = &d->replacing;
        while (*at)
                at = &(*at)->next;
        r->next = NULL;
        *at = r;
        d->n_replacing++;
}

/* ---- after a restart: the replaces under way, from the claims' annotations ---- */

/* The decision's method from its message and its old claims, for claims from before the method annotation: both
 * consolidations say "Consolidation", and only the multi-node one replaces two claims or more. */
static enum stats_disruption_method method_of_message(const char *message, const char *old) {
        for (int m = 0; m < DISRUPT_METHOD_COUNT; m++) {
                const char *name = disrupt_method_name((enum disrupt_method)m);
                if (strncmp(message, name, strlen(name)) != 0)
                        continue;
                if (m == DISRUPT_METHOD_MULTI_NODE || m == DISRUPT_METHOD_SINGLE_NODE)
                        break;
                return stats_method((enum disrupt_method)m);
        }
        return strchr(old, ',') ? STATS_DISRUPTION_MULTI_NODE_CONSOLIDATION : STATS_DISRUPTION_CONSOLIDATION;
}

enum stats_disruption_method disruption_replace_method(const json_t *claim, const char *old) {
        int m = stats_disruption_method_parse(kube_annotation(claim, DISRUPTION_ANNOTATION_METHOD));
        if (m >= 0)
                return (enum stats_disruption_method)m;
        return method_of_message(kube_annotation(claim, DISRUPTION_ANNOTATION_DECISION) ?: "", old);
}

/* A replacement claim into the replace of the claims it names, unless those are all gone or being deleted (that
 * replace was carried out). */
static void rebuild_one(struct disruption *d, const json_t *claims, const json_t *c) {
        const char *old = kube_annotation(c, DISRUPTION_ANNOTATION_REPLACES), *name = kube_meta_str(c, "name");
        const char *msg = kube_annotation(c, DISRUPTION_ANNOTATION_DECISION);
        int64_t created = 0;
        if (!old || !name || kube_deleting(c) || !any_listed(claims, old, true))
                return;
        rfc3339_parse(kube_meta_str(c, "creationTimestamp") ?: "", &created);
        struct replace *r = replace_find(d, old), *fresh = NULL;
        if (!r && !(r = fresh = replace_new(old, disruption_replace_method(c, old), msg ?: "Replace", created)))
                return;
        if (replace_add_claim(r, name) < 0) { /* a replace without replacements would delete the old claims */
                replace_free(fresh);
                return;
        }
        if (fresh)
                replace_add(d, fresh);
        if (created < r->started_ms)
                r->started_ms = created;
        log_info("disruption: NodeClaim %s replaces %s, as before the restart", name, old);
}

static void rebuild(struct disruption *d, const json_t *claims) {
        size_t i;
        json_t *c;
        d->rebuilt = true;
        json_array_foreach((json_t *)claims, i, c) {
                rebuild_one(d, claims, c);
        }
}

/* Old and new nodes of a replace under way are no candidates: as if being disrupted already. */
static void hold(struct disruption_input *di, const json_t *claims) {
        size_t j;
        json_t *c;
        json_array_foreach((json_t *)claims, j, c) {
                const char *old = kube_annotation(c, DISRUPTION_ANNOTATION_REPLACES);
                if (!old || kube_deleting(c) || !any_listed(claims, old, false))
                        continue;
                for (size_t i = 0; i < di->n_candidates; i++)
                        if (di->claims[i] == c || listed(old, di->candidates[i].claim))
                                di->candidates[i].deleting = true;
        }
}

/* A Node left with our taint by a coordinator that stopped between the taint and the delete loses it; not those of
 * the old claims of a replace under way. */
static void untaint_stale(struct disruption *d, const struct disruption_input *di) {
        json_t *held = json_object(), *names, *n;
        size_t i;
        for (const struct replace *r = d->replacing; r; r = r->next) {
                names = names_of(r->old);
                json_array_foreach(names, i, n) {
                        json_object_set(held, json_string_value(n), json_true());
                }
                json_decref(names);
        }
        if (held)
                disruption_untaint_stale(d->env.kube, d->tainted, di, held);
        json_decref(held);
}

/* ---- waiting for the replacements ---- */

/* 1 Initialized, 0 on its way, -1 failed (why says how). */
static int replacement_state(const json_t *claim, const char *name, char *why, size_t len) {
        const json_t *st = json_object_get(claim, "status");
        const char *step = json_string_value(json_object_get(st, "launchStep"));
        const char *reason = json_string_value(json_object_get(st, "failureReason"));
        /* Failed before gone: the launcher deletes a failed claim, and while it is there it says why. */
        if (step && strcmp(step, nodeclaim_step_name(NODECLAIM_STEP_FAILED)) == 0)
                snprintf(why, len, "its replacement nodeclaim/%s failed to launch (%s)", name, reason ?: "Failed");
        else if (!claim || kube_deleting(claim))
                snprintf(why, len, "its replacement nodeclaim/%s is gone", name);
        else
                return kube_condition_true(st, "Initialized") ? 1 : 0;
        return -1;
}

/* 1 every replacement Initialized, 0 waiting, -1 to be dropped (why says why). */
static int replace_state(const struct replace *r, const json_t *claims, int64_t now_ms, int64_t timeout_ms,
                         char *why, size_t len) {
        int state = 1;
        for (size_t i = 0; i < r->n_claims; i++) {
                int s = replacement_state(claim_named(claims, r->claims[i]), r->claims[i], why, len);
                if (s < 0)
                        return s;
                state &= s;
        }
        if (state == 0 && now_ms - r->started_ms > timeout_ms) {
                snprintf(why, len, "its replacements are not Initialized after %lld s", (long long)(timeout_ms / 1000));
                return -1;
        }
        return state;
}

/* Every replacement is Initialized: delete the old claims, as a delete decision does. */
static int replaced(struct disruption *d, const struct disruption_input *di, const json_t *claims,
                    const struct replace *rp) {
        json_t *names = names_of(rp->old), *n;
        size_t i;
        int r = names ? 0 : -ENOMEM;
        json_array_foreach(names, i, n) {
                const json_t *claim = claim_named(claims, json_string_value(n));
                if (r == 0 && claim && !kube_deleting(claim))
                        r = delete_claim(d, di, claim, node_of(di, json_string_value(n)), rp->message, rp->method);
        }
        json_decref(names);
        if (r == 0)
                stats_disruption_action(d->env.stats, rp->method, STATS_DISRUPTION_REPLACE);
        return r;
}

/* A replacement that stays (Initialized) is an ordinary claim from now on: its annotations go. */
static void release(struct disruption *d, const char *name) {
        json_t *patch = json_pack("{s:{s:{s:n, s:n, s:n}}}", "metadata", "annotations",
                                  DISRUPTION_ANNOTATION_REPLACES, DISRUPTION_ANNOTATION_DECISION,
                                  DISRUPTION_ANNOTATION_METHOD);
        if (!patch || kube_patch(d->env.kube, &kube_nodeclaims, NULL, name, NULL, KUBE_PATCH_MERGE, patch, NULL) < 0)
                log_warning("disruption: NodeClaim %s: cannot remove its replace annotations: %s", name,
                            kube_client_error(d->env.kube));
        json_decref(patch);
}

/* Delete the replacements that are not Initialized (the others stay, released). */
static void undo_replacements(struct disruption *d, const json_t *claims, const struct replace *rp) {
        for (size_t i = 0; i < rp->n_claims; i++) {
                const char *name = rp->claims[i];
                const json_t *claim = claim_named(claims, name);
                struct kube_delete_options o = KUBE_DELETE_OPTIONS_INIT;
                int r = 0;
                if (claim && kube_condition_true(json_object_get(claim, "status"), "Initialized"))
                        release(d, name);
                else if (!claim || !kube_deleting(claim))
                        r = kube_delete(d->env.kube, &kube_nodeclaims, NULL, name, &o, NULL);
                if (r < 0 && r != -ENOENT)
                        log_warning("disruption: cannot delete the replacement NodeClaim %s: %s", name,
                                    kube_client_error(d->env.kube));
        }
}

/* The decision drops: the replacements not Initialized go, the old claims stay, with a Warning saying why. */
static void dropped(struct disruption *d, const struct disruption_input *di, const json_t *claims,
                    const struct replace *r, const char *why) {
        char msg[2 * DISRUPT_MESSAGE_MAX];
        snprintf(msg, sizeof msg, "%s: not carried out: %s", r->message, why);
        undo_replacements(d, claims, r);
        json_t *names = names_of(r->old), *n;
        size_t i;
        json_array_foreach(names, i, n) {
                const json_t *claim = claim_named(claims, json_string_value(n));
                const json_t *node = node_of(di, json_string_value(n));
                if (claim && !kube_deleting(claim))
                        disruption_untaint(d->env.kube, d->tainted, node);
                if (claim)
                        tell(d, claim, node, "Warning", "DisruptionReplacementFailed", msg);
        }
        json_decref(names);
        log_warning("disruption: %s: %s", r->old, msg);
}

/* Each replace under way: carried out once its replacements are Initialized, dropped when one fails. */
static void follow(struct disruption *d, const struct disruption_input *di, const json_t *claims, int64_t now_ms) {
        char why[DISRUPT_MESSAGE_MAX];
        for (struct replace **at = &d->replacing, *r; (r = *at);) {
                int s = replace_state(r, claims, now_ms, d->env.replace_timeout_ms, why, sizeof why);
                if (s == 0 || (s > 0 && replaced(d, di, claims, r) < 0)) {
                        at = &r->next;
                        continue;
                }
                if (s < 0)
                        dropped(d, di, claims, r, why);
                *at = r->next;
                d->n_replacing--;
                replace_free(r);
        }
}

/* ---- starting a replace ---- */

static bool same_shapes(const struct sim_result *res, const struct disrupt_decision *dec) {
        if (res->n_claims != dec->n_replacements)
                return false;
        for (size_t k = 0; k < res->n_claims; k++)
                if (strcmp(res->claims[k].shape->name, dec->replacements[k]->name) != 0)
                        return false;
        return true;
}

/* Create the replacement claims of res into r's claims; when not all could be, delete those that were. */
static int launch(struct disruption *d, const struct disruption_input *di, const struct sim_result *res,
                  struct replace *r) {
        json_t *ann = json_pack("{s:s, s:s, s:s}", DISRUPTION_ANNOTATION_REPLACES, r->old,
                                DISRUPTION_ANNOTATION_DECISION, r->message,
                                DISRUPTION_ANNOTATION_METHOD, stats_disruption_method_name(r->method));
        char **names = calloc(res->n_claims + 1, sizeof *names);
        size_t n = ann && names ? provisioner_create_replacements(d->env.provisioner, di->round, res, ann, names) : 0;
        int added = 0;
        for (size_t k = 0; names && k < res->n_claims; k++) {
                if (names[k] && added == 0)
                        added = replace_add_claim(r, names[k]);
                free(names[k]);
        }
        json_decref(ann);
        if (!names)
                return -ENOMEM;
        free(names);
        if (n == res->n_claims && added == 0)
                return 0;
        undo_replacements(d, NULL, r);
        return added < 0 ? added : -EIO;
}

/* Events on the old claims and Nodes: the replacements come first. */
static void announce(struct disruption *d, const struct disruption_input *di, const struct disrupt_decision *dec,
                     const struct replace *r) {
        char msg[2 * DISRUPT_MESSAGE_MAX], *at = msg;
        at += snprintf(msg, sizeof msg, "%s; launching the replacement first:", dec->message);
        for (size_t i = 0; i < r->n_claims; i++) {
                if (at < msg + sizeof msg)
                        at += snprintf(at, (size_t)(msg + sizeof msg - at), " nodeclaim/%s", r->claims[i]);
        }
        for (size_t k = 0; k < dec->n_candidates; k++)
                tell(d, di->claims[dec->candidates[k]], di->nodes[dec->candidates[k]], "Normal",
                     "DisruptionLaunchingReplacement", msg);
        log_info("disruption: %s", msg);
}

/* Launch the replacements of a replace decision that still holds: the simulation of its trial run again gives
 * their hosts and labels. -ESTALE when it no longer plans the same shapes. */
static int start_replace(struct disruption *d, const struct disruption_input *di, const struct disrupt_decision *dec) {
        struct sim_result *res = NULL;
        char old[KEY_MAX];
        int r = disrupt_replay(&di->in, dec->candidates, dec->n_candidates, &res);
        if (r < 0)
                return r;
        claims_list(di, dec, old, sizeof old);
        struct replace *rp = replace_new(old, stats_method(dec->method), dec->message, di->in.now_ms);
        if (!rp)
                r = -ENOMEM;
        else if (!same_shapes(res, dec))
                r = -ESTALE;
        if (r == 0)
                r = disruption_taint(d->env.kube, d->tainted, di, dec->candidates, dec->n_candidates);
        if (r == 0 && (r = launch(d, di, res, rp)) < 0)
                for (size_t k = 0; k < dec->n_candidates; k++)
                        disruption_untaint(d->env.kube, d->tainted, di->nodes[dec->candidates[k]]);
        simulate_result_free(res);
        if (r < 0) {
                replace_free(rp);
                return r;
        }
        announce(d, di, dec, rp);
        replace_add(d, rp);
        return 0;
}

/* A NodePool whose disruption settings are bad is left out of scale-down: say so once per error. */
static void log_problems(struct disruption *d, const json_t *problems) {
        size_t i;
        json_t *p;
        json_array_foreach(problems, i, p) {
                const char *text = json_string_value(p);
                if (!text || json_object_get(d->logged, text))
                        continue;
                json_object_set_new(d->logged, text, json_true());
                log_warning("disruption: %s; the NodePool is left out of scale-down", text);
        }
}

/* ---- one pass ---- */

/* Can the decision be carried out here? A replace needs the provisioner. */
static bool replaceable(const struct disruption *d, const struct disrupt_decision *dec) {
        return dec->n_replacements == 0 || d->env.provisioner;
}

/* Carry a decision out: delete its claims, or launch its replacements. */
static int execute(struct disruption *d, const struct disruption_input *di, const struct disrupt_decision *dec,
                   const char *key) {
        if (dec->n_replacements == 0)
                return carry_out(d, di, dec);
        int r = start_replace(d, di, dec);
        if (r < 0 && r != -ESTALE)
                log_error_errno(r, "disruption: %s: cannot launch the replacements", key);
        return r;
}

static void act(struct disruption *d, const struct disruption_input *di, const struct disrupt_result *res,
                struct disruption_outcome *out) {
        char key[KEY_MAX];
        size_t n_plan = d->n_plan;
        for (size_t j = 0; j < res->n_decisions; j++) {
                const struct disrupt_decision *dec = &res->decisions[j];
                decision_key(di, dec, key, sizeof key);
                stats_disruption_decision(d->env.stats, stats_method(dec->method),
                                          dec->n_replacements ? STATS_DISRUPTION_REPLACE : STATS_DISRUPTION_DELETE);
                if (replaceable(d, dec) && planned(d, key) && execute(d, di, dec, key) == 0) {
                        out->carried_out++;
                        n_plan--;
                }
        }
        out->stale = n_plan; /* decided last pass, no longer decided on fresh state: dropped */
}

/* Keep this pass's decisions that were not carried out for the next pass to check. */
static void replan(struct disruption *d, const struct disruption_input *di, const struct disrupt_result *res) {
        char key[KEY_MAX];
        bool done[PLAN_MAX] = { false };
        size_t n = 0;
        for (size_t j = 0; j < res->n_decisions && j < PLAN_MAX; j++) {
                decision_key(di, &res->decisions[j], key, sizeof key);
                done[j] = planned(d, key);
        }
        plan_clear(d);
        for (size_t j = 0; j < res->n_decisions && n < PLAN_MAX; j++) {
                if (done[j] || !replaceable(d, &res->decisions[j]))
                        continue;
                decision_key(di, &res->decisions[j], key, sizeof key);
                d->plan[n] = strdup(key);
                n += d->plan[n] != NULL;
        }
        d->n_plan = n;
}

/* The input without host room yet (decide() fetches it only when it could change the decisions), after the
 * replaces under way are followed; their nodes held. */
static int prepare(struct disruption *d, const struct provisioner_snapshot *snap, int64_t now_ms,
                   struct disruption_input **ret) {
        struct disruption_input *di = NULL;
        int r = disruption_input_new(snap, now_ms, d->env.repair, &di);
        if (r == 0) {
                di->in.repair_after_ms = d->env.repair_after_ms;
                di->in.pass_period_ms = d->env.period_ms;
                di->in.hosts_unknown = d->env.provisioner != NULL;
                log_problems(d, di->problems);
        }
        if (r == 0)
                r = disruption_input_pod_events(di, d->pod_marks, now_ms);
        if (r == 0)
                r = disruption_input_templates(di, snap->classes);
        if (r == 0)
                disruption_drift_templates(d->env.provisioner, di);
        if (r < 0) {
                disruption_input_free(di);
                return r;
        }
        if (!d->rebuilt)
                rebuild(d, snap->claims);
        follow(d, di, snap->claims, now_ms);
        untaint_stale(d, di);
        hold(di, snap->claims);
        *ret = di;
        return 0;
}

/* The decisions, first without host room: asking every host's agent (or Proxmox) for it is what a pass costs most,
 * and only a decision that might launch a replacement (or move pods bound to zones) needs it. When the decisions
 * say so, the room is fetched and they are made again. */
static int decide(struct disruption *d, const struct provisioner_snapshot *snap, struct disruption_input *di,
                  struct disrupt_result **ret) {
        int r = disrupt_decide(&di->in, ret);
        if (r < 0 || !(*ret)->needs_hosts)
                return r;
        disrupt_result_free(*ret);
        *ret = NULL;
        di->in.hosts_unknown = false;
        r = provisioner_add_hosts(d->env.provisioner, di->round, snap);
        if (r == 0)
                stats_add(d->env.stats, STATS_DISRUPTION_HOST_ROOM, 1);
        return r < 0 ? r : disrupt_decide(&di->in, ret);
}

int disruption_pass(struct disruption *d, const struct provisioner_snapshot *snap, int64_t now_ms,
                    struct disruption_outcome *ret) {
        struct disruption_input *di = NULL;
        struct disrupt_result *res = NULL;
        struct disruption_outcome out = { 0 };
        int r = prepare(d, snap, now_ms, &di);
        if (r == 0)
                r = decide(d, snap, di, &res);
        if (r < 0) {
                disruption_input_free(di);
                return r;
        }
        disruption_drift_conditions(d->env.kube, di, now_ms);
        out.candidates = di->n_candidates;
        out.decided = res->n_decisions;
        out.blocked = res->n_skips;
        act(d, di, res, &out);
        replan(d, di, res);
        tell_skips(d, di, res);
        tell_invalid_do_not_disrupt(d, di);
        out.replacing = d->n_replacing;
        disrupt_result_free(res);
        disruption_input_free(di);
        *ret = out;
        return 0;
}
