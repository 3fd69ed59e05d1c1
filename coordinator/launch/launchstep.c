/* launchstep: the one result of a launch step and the decisions the steps take, apart from their I/O. Pure. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "launchstep.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "backoff.h"
#include "config.h"
#include "errmsg.h"
#include "pve.h"
#include "rfc3339.h"
#include "kube_object.h"
#include "kube_types.h"

/* ---- results ---- */

struct launchstep_result launchstep_done(void) {
        return (struct launchstep_result){ .kind = LAUNCHSTEP_DONE };
}

struct launchstep_result launchstep_moved(void) {
        return (struct launchstep_result){ .kind = LAUNCHSTEP_MOVED };
}

struct launchstep_result launchstep_wait(int64_t ms) {
        return (struct launchstep_result){ .kind = LAUNCHSTEP_WAIT, .requeue_ms = ms > 0 ? ms : 1 };
}

static struct launchstep_result vresult(enum launchstep_kind kind, const char *reason, int err, const char *fmt,
                                        va_list ap) {
        struct launchstep_result r = { .kind = kind, .reason = reason };
        r.err = errmsg_vset(r.message, sizeof r.message, err, fmt, ap);
        return r;
}

struct launchstep_result launchstep_fail(const char *reason, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        struct launchstep_result r = vresult(LAUNCHSTEP_FAIL, reason, 0, fmt, ap);
        va_end(ap);
        return r;
}

struct launchstep_result launchstep_error(int err, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        struct launchstep_result r = vresult(LAUNCHSTEP_ERROR, NULL, err, fmt, ap);
        va_end(ap);
        return r;
}

bool launchstep_ok(const struct launchstep_result *r) {
        return r->kind == LAUNCHSTEP_DONE;
}

bool launchstep_is_error(const struct launchstep_result *r, int err) {
        return r->kind == LAUNCHSTEP_ERROR && r->err == err;
}

struct launchstep_result launchstep_then(struct launchstep_result r, struct launchstep_result next) {
        return r.kind == LAUNCHSTEP_DONE ? next : r;
}

/* ---- what a reconcile does ---- */

enum launchstep_todo launchstep_todo(enum nodeclaim_step step, bool deleting, bool placed, bool status_valid) {
        if (deleting)
                return LAUNCHSTEP_TODO_FINALIZE;
        if (step == NODECLAIM_STEP_INITIALIZED)
                return LAUNCHSTEP_TODO_NOTHING;
        if (step == NODECLAIM_STEP_FAILED)
                return LAUNCHSTEP_TODO_FAILED;
        return placed && status_valid ? LAUNCHSTEP_TODO_STEPS : LAUNCHSTEP_TODO_INVALID;
}

/* A VMID counts only when both record it: before that, a conflict starts the reconcile over. */
bool launchstep_same_launch(const char *uid_a, const struct nodeclaim_status *a, const char *uid_b,
                            const struct nodeclaim_status *b, bool b_deleting) {
        return uid_a && uid_b && strcmp(uid_a, uid_b) == 0 && a->vmid && a->vmid == b->vmid &&
               a->launch_step == b->launch_step && !b_deleting;
}

/* ---- retries, waits and giving up ---- */

struct launchstep_retry launchstep_retry(int64_t attempts) {
        struct launchstep_retry r = { .attempts = attempts + 1 };
        r.give_up = r.attempts >= LAUNCHSTEP_MAX_ATTEMPTS;
        if (!r.give_up)
                r.requeue_ms = backoff_ceiling_ms((unsigned)r.attempts - 1, LAUNCHSTEP_RETRY_BASE_MS,
                                                  LAUNCHSTEP_RETRY_MAX_MS);
        return r;
}

bool launchstep_iso_unrecorded(const struct nodeclaim_status *st) {
        return st->vmid && !st->iso_volume[0] && !nodeclaim_condition_true(st, "Launched");
}

bool launchstep_refused(const char *message) {
        return message && strstr(message, "Permission check failed") != NULL;
}

struct launchstep_result launchstep_clone_wait(int64_t started_ms, int64_t now_ms, int64_t timeout_ms, uint32_t vmid) {
        int64_t left = started_ms ? started_ms + timeout_ms - now_ms : timeout_ms;
        if (left <= 0)
                return launchstep_fail("CloneTimeout", "the clone of VM %lld did not finish within %lld s",
                                       (long long)vmid, (long long)(timeout_ms / 1000));
        int64_t half = (now_ms - started_ms) / 2;
        int64_t delay = half;
        if (delay < 10)
                delay = 10;
        else if (delay > LAUNCHSTEP_POLL_MS)
                delay = LAUNCHSTEP_POLL_MS;
        return launchstep_wait(left < delay ? left : delay);
}

enum launchstep_clone_end launchstep_clone_end(const char *exitstatus) {
        if (strstr(exitstatus, "already exists"))
                return LAUNCHSTEP_CLONE_TAKEN;
        return pve_task_exit_ok(exitstatus) ? LAUNCHSTEP_CLONE_OK : LAUNCHSTEP_CLONE_FAILED;
}

int launchstep_vm_owner(const char *uid, const json_t *config) {
        char owner[LAUNCHER_UID_MAX];
        int64_t created;
        const char *desc = json_string_value(json_object_get(config, "description"));
        if (launcher_description_parse(desc, owner, &created) < 0)
                return json_object_get(config, "lock") ? 0 : -1;
        if (strcmp(owner, uid) != 0)
                return -1;
        /* Configured (tagged pvescale: the tag and the UUID go in one PUT): its SMBIOS UUID must be the claim's,
         * or someone made it under the VMID with a copy of the description. Before that, the clone's own UUID; and a
         * VM an older coordinator described (no smbios-uuid line) by its description alone, as then. */
        bool configured = launcher_config_tagged(config, LAUNCHER_TAG) && launcher_description_names_uuid(desc);
        return !configured || launcher_config_uuid_is(config, uid) ? 1 : -1;
}

bool launchstep_node_is_claims(const json_t *node, const char *uid) {
        const char *uuid = kube_node_of(node).system_uuid;
        return !uuid || !*uuid || strcasecmp(uuid, uid) == 0;
}

void launchstep_cdrom_volume(const char *ide2, char *volume, size_t len) {
        if (ide2 && strstr(ide2, "media=cdrom") && strncmp(ide2, "none", 4) != 0)
                snprintf(volume, len, "%.*s", (int)strcspn(ide2, ","), ide2);
        else
                snprintf(volume, len, "%s", "");
}

enum launchstep_bind launchstep_bind_check(int bind_err, int64_t bound_vmid, uint32_t vmid) {
        if (bound_vmid == (int64_t)vmid)
                return LAUNCHSTEP_BIND_DONE;
        return bind_err == -EEXIST ? LAUNCHSTEP_BIND_TAKEN : LAUNCHSTEP_BIND_RETRY;
}

struct launchstep_result launchstep_registration_wait(int64_t started_ms, int64_t now_ms, int64_t timeout_ms,
                                                      const char *provider_id) {
        int64_t left = started_ms + timeout_ms - now_ms;
        if (left <= 0)
                return launchstep_fail("RegistrationTimeout", "no Node with providerID %s within %lld s", provider_id,
                                       (long long)(timeout_ms / 1000));
        return launchstep_wait(left < LAUNCHSTEP_POLL_MS ? left : LAUNCHSTEP_POLL_MS);
}

/* A Ready Node whose ephemeral taints Kubernetes has not taken off yet is waited for (its next event brings
 * Registered and Initialized in one write), but not for ever: Ready for LAUNCHSTEP_SETTLE_MAX_MS (the node
 * lifecycle controller takes the not-ready taint off within its 5 s monitor period), or since an unknown time, it
 * is recorded Registered, to wait for Initialized like any other. */
enum launchstep_node launchstep_node(enum launcher_node_state state, int64_t ready_since_ms, int64_t now_ms) {
        if (state == LAUNCHER_NODE_INITIALIZED)
                return LAUNCHSTEP_NODE_INITIALIZED;
        bool settling = ready_since_ms >= 0 && now_ms - ready_since_ms < LAUNCHSTEP_SETTLE_MAX_MS;
        if (state == LAUNCHER_NODE_SETTLING && settling)
                return LAUNCHSTEP_NODE_WAIT;
        return LAUNCHSTEP_NODE_REGISTERED;
}

/* Never delete a VM someone else holds under the same id. A clone the claim sent but did not record cannot be
 * told from someone else's while it runs: it is given up well after it should be done. */
enum launchstep_teardown launchstep_teardown_vm(int owner, bool locked, const struct nodeclaim_status *st,
                                                int64_t now_ms, int64_t clone_timeout_ms) {
        if (owner == 0 && st->clone_task[0])
                owner = 1; /* Proxmox accepted our clone to this VMID */
        if (owner < 0)
                return LAUNCHSTEP_TEARDOWN_KEEP;
        if (!locked)
                return LAUNCHSTEP_TEARDOWN_DELETE;
        int64_t started = st->clone_started_ms;
        if (owner == 0 && started && now_ms > started + 2 * clone_timeout_ms + 60000)
                return LAUNCHSTEP_TEARDOWN_KEEP;
        return LAUNCHSTEP_TEARDOWN_WAIT;
}

/* Karpenter's nodeclaim garbage collection deletes a launched claim whose instance the cloud provider no longer
 * lists; its Node's deletion takes the claim with it. Here both are found by the periodic collection. */
bool launchstep_gc_claim(const struct nodeclaim_status *st, bool deleting, enum launchstep_gc_vm vm, bool node_exists,
                         char *msg, size_t len) {
        if (deleting || st->launch_step != NODECLAIM_STEP_INITIALIZED)
                return false;
        if (vm == LAUNCHSTEP_GC_VM_GONE || vm == LAUNCHSTEP_GC_VM_OTHER) {
                snprintf(msg, len, "its VM %u in %s is %s", st->vmid, st->region,
                         vm == LAUNCHSTEP_GC_VM_GONE ? "gone" : "another's now");
                return true;
        }
        if (st->node_name[0] && !node_exists) {
                snprintf(msg, len, "its Node %s is gone", st->node_name);
                return true;
        }
        return false;
}

/* Claims that reserved already (and have no VM configured yet) always count; claims that have not reserved yet
 * count when they are older (then by name), so two launches never both take the last room. */
bool launchstep_holds_room(enum nodeclaim_step step, const char *created, const char *name, const char *my_created,
                           const char *my_name) {
        if (step != NODECLAIM_STEP_NONE)
                return step == NODECLAIM_STEP_RESERVED || step == NODECLAIM_STEP_VMID_ALLOCATED ||
                       step == NODECLAIM_STEP_CLONING;
        int cmp = strcmp(created, my_created);
        return cmp < 0 || (cmp == 0 && strcmp(name, my_name) < 0);
}

bool launchstep_deferred(enum nodeclaim_step step) {
        return step == NODECLAIM_STEP_CONFIGURED;
}

/* ---- what steps record ---- */

void launchstep_record(struct nodeclaim_status *st, enum nodeclaim_step step) {
        st->launch_step = step;
        st->attempts = 0;
        st->last_error[0] = '\0';
}

void launchstep_vmid_picked(struct nodeclaim_status *st, const char *region, uint32_t vmid, int64_t now_ms) {
        st->vmid = vmid;
        snprintf(st->provider_id, sizeof st->provider_id, "proxmox://%s/%u", region, vmid);
        if (!st->clone_started_ms)
                st->clone_started_ms = now_ms;
}

void launchstep_vmid_dropped(struct nodeclaim_status *st) {
        st->vmid = 0;
        st->clone_task[0] = '\0';
        st->provider_id[0] = '\0';
}

void launchstep_attempt_failed(struct nodeclaim_status *st, int64_t attempts, const char *message) {
        st->attempts = attempts;
        snprintf(st->last_error, sizeof st->last_error, "%s", message);
}

/* The agent's numa entries in the status form (whole MiB; at most LAUNCHER_MAX_NUMA). */
static int agent_placement(struct nodeclaim_placement *p, const json_t *reservation) {
        int err = 0;
        const char *cpus = json_string_value(json_object_get(reservation, "cpus"));
        json_t *numa = launcher_placement_numa_from_agent(json_object_get(reservation, "numa"), &err);
        int r = numa ? launcher_numa_parse(numa, p->numa, &p->n_numa) : err;
        json_decref(numa);
        if (r == 0 && cpus && strlen(cpus) >= sizeof p->cpus)
                r = -EINVAL;
        if (r == 0)
                snprintf(p->cpus, sizeof p->cpus, "%s", cpus ? cpus : "");
        p->set = r == 0;
        return r;
}

int launchstep_reserved_by_agent(struct nodeclaim_status *st, const json_t *reservation) {
        const char *id = json_string_value(json_object_get(reservation, "id"));
        if (!id || strlen(id) >= sizeof st->reservation_id || agent_placement(&st->placement, reservation) < 0)
                return -EINVAL;
        st->reservation = NODECLAIM_RESERVATION_AGENT;
        snprintf(st->reservation_id, sizeof st->reservation_id, "%s", id);
        return nodeclaim_condition_set(st, "Launched", "Unknown", "Launching", "reserved on the host agent");
}

int launchstep_reserved_by_pve(struct nodeclaim_status *st) {
        st->reservation = NODECLAIM_RESERVATION_PVE;
        st->reservation_id[0] = '\0';
        return nodeclaim_condition_set(st, "Launched", "Unknown", "Launching",
                                       "reserved by Proxmox accounting (no host agent)");
}

int launchstep_launched(struct nodeclaim_status *st) {
        return nodeclaim_condition_set(st, "Launched", "True", "Launched", "VM started and pinned") ?:
               nodeclaim_condition_set(st, "Registered", "Unknown", "AwaitingNode", "waiting for the Node to register");
}

int launchstep_registered(struct nodeclaim_status *st, const char *node_name) {
        snprintf(st->node_name, sizeof st->node_name, "%s", node_name);
        return nodeclaim_condition_set(st, "Registered", "True", "Registered", "") ?:
               nodeclaim_condition_set(st, "Initialized", "Unknown", "AwaitingReady",
                                       "waiting for the Node to be Ready");
}

int launchstep_initialized(struct nodeclaim_status *st, const char *node_name) {
        int r = 0;
        st->token_id[0] = st->iso_volume[0] = '\0';
        if (node_name) {
                snprintf(st->node_name, sizeof st->node_name, "%s", node_name);
                r = nodeclaim_condition_set(st, "Registered", "True", "Registered", "");
        }
        return r ?: nodeclaim_condition_set(st, "Initialized", "True", "Initialized", "");
}

struct launchstep_failure launchstep_failure(const struct nodeclaim_status *st, const struct launchstep_result *why) {
        struct launchstep_failure f;
        const char *reason = why && why->kind == LAUNCHSTEP_FAIL && why->reason ? why->reason : st->failure_reason;
        snprintf(f.reason, sizeof f.reason, "%s", reason[0] ? reason : "LaunchFailed");
        snprintf(f.message, sizeof f.message, "%s", why && why->message[0] ? why->message : st->last_error);
        return f;
}

int launchstep_failed(struct nodeclaim_status *st, const char *reason, const char *message) {
        bool launched = nodeclaim_condition_true(st, "Launched");
        st->launch_step = NODECLAIM_STEP_FAILED;
        snprintf(st->last_error, sizeof st->last_error, "%s", message);
        snprintf(st->failure_reason, sizeof st->failure_reason, "%s", reason);
        return nodeclaim_condition_set(st, launched ? "Registered" : "Launched", "False", reason, message);
}

/* ---- termination ---- */

static bool taint_is(const json_t *taint, const char *key, const char *effect) {
        const char *k = json_string_value(json_object_get(taint, "key"));
        const char *e = json_string_value(json_object_get(taint, "effect"));
        return k && e && strcmp(k, key) == 0 && strcmp(e, effect) == 0;
}

bool launchstep_registration_taint(const json_t *taint) {
        const char *k = json_string_value(json_object_get(taint, "key"));
        return (k && strcmp(k, LAUNCHSTEP_TAINT_UNREGISTERED) == 0) ||
               taint_is(taint, LAUNCHSTEP_TAINT_KARPENTER_UNREGISTERED, "NoExecute");
}

bool launchstep_node_disrupted(const json_t *taints) {
        size_t i;
        json_t *t;
        json_array_foreach(taints, i, t) {
                if (taint_is(t, LAUNCHSTEP_TAINT_DISRUPTED, "NoSchedule") ||
                    taint_is(t, LAUNCHSTEP_TAINT_KARPENTER_DISRUPTED, "NoSchedule"))
                        return true;
        }
        return false;
}

int launchstep_node_taint(json_t *node) {
        json_t *spec = json_object_get(node, "spec"), *taints;
        if (!json_is_object(spec) && json_object_set_new(node, "spec", spec = json_object()) < 0)
                return -ENOMEM;
        taints = json_object_get(spec, "taints");
        if (launchstep_node_disrupted(taints))
                return 1;
        if (!json_is_array(taints) && json_object_set_new(spec, "taints", taints = json_array()) < 0)
                return -ENOMEM;
        json_t *t = json_pack("{s:s, s:s}", "key", LAUNCHSTEP_TAINT_DISRUPTED, "effect", "NoSchedule");
        return json_array_append_new(taints, t) < 0 ? -ENOMEM : 0;
}

int launchstep_node_untaint(json_t *node) {
        json_t *taints = kube_taints_mut(node);
        int r = 1;
        for (size_t i = json_array_size(taints); i-- > 0;)
                if (taint_is(json_array_get(taints, i), LAUNCHSTEP_TAINT_DISRUPTED, "NoSchedule")) {
                        json_array_remove(taints, i);
                        r = 0;
                }
        return r;
}

/* A toleration of key:NoSchedule (no value), as the scheduler matches them: the key, or an empty key with Exists;
 * Exists, or Equal with an empty value; no effect, or NoSchedule. */
static bool tolerates(const json_t *tol, const char *key) {
        const char *k = json_string_value(json_object_get(tol, "key"));
        const char *op = json_string_value(json_object_get(tol, "operator"));
        const char *v = json_string_value(json_object_get(tol, "value"));
        const char *e = json_string_value(json_object_get(tol, "effect"));
        bool exists = op && strcmp(op, "Exists") == 0;
        bool key_ok = (k && strcmp(k, key) == 0) || ((!k || !k[0]) && exists);
        bool value_ok = exists || ((!op || !op[0] || strcmp(op, "Equal") == 0) && (!v || !v[0]));
        return key_ok && value_ok && (!e || !e[0] || strcmp(e, "NoSchedule") == 0);
}

static bool tolerates_disrupted(const json_t *pod) {
        size_t i;
        json_t *tol;
        json_array_foreach(kube_pod_of(pod).tolerations, i, tol) {
                if (tolerates(tol, LAUNCHSTEP_TAINT_DISRUPTED))
                        return true;
        }
        return false;
}

static bool finished(const json_t *pod) {
        const char *phase = kube_pod_of(pod).phase;
        return phase && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0);
}

static bool stuck_terminating(const json_t *meta, int64_t now_ms) {
        int64_t at;
        const char *s = json_string_value(json_object_get(meta, "deletionTimestamp"));
        return s && rfc3339_parse(s, &at) == 0 && now_ms - at > LAUNCHSTEP_STUCK_TERMINATING_MS;
}

/* One do-not-disrupt value: "true", or a duration after start_ms (0: unknown, still protected) that has not passed. */
static bool protects(const char *v, int64_t start_ms, int64_t now_ms) {
        uint64_t ms;
        if (!v)
                return false;
        if (strcmp(v, "true") == 0)
                return true;
        return config_parse_duration(v, &ms) == 0 && (start_ms == 0 || now_ms < start_ms + (int64_t)ms);
}

/* When the pod started (status.startTime), else when it was created; 0 when neither is known. */
static int64_t pod_start_ms(const struct kube_pod *p) {
        int64_t ms = 0;
        const char *started = kube_str(p->status, "startTime");
        if (started && rfc3339_parse(started, &ms) == 0)
                return ms;
        const char *created = p->meta.creation_timestamp;
        return created && rfc3339_parse(created, &ms) == 0 ? ms : 0;
}

bool launchstep_pod_do_not_disrupt(const json_t *pod, int64_t now_ms) {
        struct kube_pod p = kube_pod_of(pod);
        int64_t start_ms = pod_start_ms(&p);
        return protects(kube_str(p.meta.annotations, LAUNCHSTEP_ANNOTATION_DO_NOT_DISRUPT), start_ms, now_ms) ||
               protects(kube_str(p.meta.annotations, LAUNCHSTEP_ANNOTATION_KARPENTER_DO_NOT_DISRUPT), start_ms, now_ms);
}

static bool valid_do_not_disrupt(const char *v) {
        uint64_t ms;
        return strcmp(v, "true") == 0 || (config_parse_duration(v, &ms) == 0 && ms > 0);
}

const char *launchstep_pod_do_not_disrupt_invalid(const json_t *pod, const char **ret_key) {
        static const char *const keys[] = { LAUNCHSTEP_ANNOTATION_DO_NOT_DISRUPT,
                                            LAUNCHSTEP_ANNOTATION_KARPENTER_DO_NOT_DISRUPT };
        const json_t *annotations = kube_meta_of(pod).annotations;
        for (size_t k = 0; k < 2; k++) {
                const char *v = kube_str(annotations, keys[k]);
                if (v && !valid_do_not_disrupt(v)) {
                        *ret_key = keys[k];
                        return v;
                }
        }
        return NULL;
}

enum launchstep_drain launchstep_pod_drain(const json_t *pod, int64_t now_ms) {
        const json_t *meta = json_object_get(pod, "metadata");
        if (kube_annotation(pod, "kubernetes.io/config.mirror") || kube_owned_by_daemonset(pod) ||
            tolerates_disrupted(pod) || finished(pod) || stuck_terminating(meta, now_ms))
                return LAUNCHSTEP_DRAIN_STAY;
        if (kube_deleting(pod))
                return LAUNCHSTEP_DRAIN_GOING;
        return launchstep_pod_do_not_disrupt(pod, now_ms) ? LAUNCHSTEP_DRAIN_HOLD : LAUNCHSTEP_DRAIN_EVICT;
}

int launchstep_grace_period(const json_t *claim, const json_t *pool, int64_t *ret_ms, char *err, size_t errlen) {
        const char *where = "spec.terminationGracePeriod";
        const char *s = json_string_value(kube_nodeclaim_of(claim).termination_grace_period);
        uint64_t ms;
        if (!s) {
                where = "NodePool spec.template.spec.terminationGracePeriod";
                s = kube_nodepool_of(pool).termination_grace_period;
        }
        *ret_ms = -1;
        if (!s)
                return 0;
        if (config_parse_duration(s, &ms) < 0)
                return errmsg_set(err, errlen, -EINVAL, "%s: \"%s\" is no duration", where, s);
        *ret_ms = (int64_t)ms;
        return 0;
}

bool launchstep_grace_over(int64_t started_ms, int64_t grace_ms, int64_t now_ms) {
        return grace_ms >= 0 && started_ms > 0 && now_ms - started_ms >= grace_ms;
}

bool launchstep_termination_due(const json_t *claim, int64_t now_ms) {
        const char *s = kube_annotation(claim, LAUNCHSTEP_ANNOTATION_TERMINATION_TIMESTAMP);
        int64_t at;
        return s && rfc3339_parse(s, &at) == 0 && now_ms >= at;
}

int64_t launchstep_drain_requeue(int64_t started_ms, int64_t now_ms) {
        int64_t d = started_ms > 0 && now_ms > started_ms ? (now_ms - started_ms) / 10 : 0;
        if (d < LAUNCHSTEP_DRAIN_MIN_MS)
                return LAUNCHSTEP_DRAIN_MIN_MS;
        return d > LAUNCHSTEP_DRAIN_MAX_MS ? LAUNCHSTEP_DRAIN_MAX_MS : d;
}

int launchstep_term_record(struct nodeclaim_status *st, enum nodeclaim_term term, int64_t now_ms) {
        st->term_step = term;
        switch (term) {
        case NODECLAIM_TERM_TAINTED:
                if (!st->term_started_ms)
                        st->term_started_ms = now_ms;
                return nodeclaim_condition_set(st, "Drained", "False", "Draining", "evicting the Node's pods");
        case NODECLAIM_TERM_DRAINED:
                return nodeclaim_condition_set(st, "Drained", "True", "Drained", "");
        case NODECLAIM_TERM_NODE_DELETED:
                return nodeclaim_condition_set(st, "InstanceTerminating", "True", "InstanceTerminating", "");
        default:
                return 0;
        }
}
