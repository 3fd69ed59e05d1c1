/* pin_service: when to pin: VMs bound to a placed reservation, under the static policy, on every (re)start. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "pin_service.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inventory.h"
#include "ledger.h"
#include "log.h"
#include "pinning_apply.h"
#include "pinning_proc.h"
#include "pinning_qmp.h"
#include "qmp_worker.h"

#define PIN_RECHECKS 4 /* timer ticks (2 s) */
/* The qmp_error of a POST /pin report: it takes the vCPU threads from /proc rather than wait for QEMU. */
#define PIN_QMP_NOT_ASKED (-EAGAIN)

static const struct pinning_env live = {.proc_root = PINNING_PROC_ROOT, .sys = &pinning_sys_linux};

/* The plan for a VM bound to a placed reservation: borrowed from the placement; mem_nodes is owned. */
static int plan_for(const struct pin_env *env, int vmid, struct pin_plan *plan, struct cpuset **ret_nodes) {
        const struct reservation *r = ledger_find_vmid(env->ledger, vmid);
        const struct vm *vm = inventory_find(env->inventory, vmid);
        if (!r || !r->placement)
                return -ENOENT;
        if (!vm || !vm->running || vm->pid <= 0)
                return -ESRCH;
        struct cpuset *nodes = cpuset_new();
        if (!nodes)
                return -ENOMEM;
        for (size_t i = 0; i < r->placement->n_numa; i++)
                cpuset_set(nodes, (unsigned)r->placement->numa[i].node);
        *plan = (struct pin_plan){
                .vmid = vmid,
                .pid = vm->pid,
                .n_vcpus = r->placement->n_vcpus,
                .vcpu_map = r->placement->vcpu_map,
                .vm_cpus = r->placement->cpus,
                .mem_nodes = nodes,
        };
        *ret_nodes = nodes;
        return 0;
}

static struct pin_record *record_for(struct pin_state *s, int vmid) {
        for (size_t i = 0; i < s->n; i++)
                if (s->records[i].vmid == vmid)
                        return &s->records[i];
        struct pin_record *grown = realloc(s->records, (s->n + 1) * sizeof *grown);
        if (!grown)
                return NULL;
        s->records = grown;
        s->records[s->n] = (struct pin_record){ .vmid = vmid };
        return &s->records[s->n++];
}

/* A run's failure (the level chosen by the caller), or its success. */
static void log_run(enum log_level level, const char *field, int vmid, int r, const struct pin_report *rep,
                    const char *note) {
        if (r == 0)
                log_full(level, __FILE__, __LINE__, __func__, field,
                         "pinned VM %d: %u vCPU threads (%s), %u other threads, memory %s%s", vmid, rep->vcpus_pinned,
                         rep->vcpus_from_qmp ? "QMP" : "/proc", rep->others_pinned,
                         pinning_memory_result_to_string(rep->memory), note);
        else if (r > 0)
                log_full(level, __FILE__, __LINE__, __func__, field,
                         "pinning VM %d: %u threads failed (first: tid %d, %s)%s", vmid, rep->n_failures,
                         rep->failures[0].tid, strerror(-rep->failures[0].error), note);
        else
                log_full(level, __FILE__, __LINE__, __func__, field, "cannot pin VM %d: %s%s", vmid, strerror(-r),
                         note);
}

/* A failure that repeats is logged when it starts, when its cause changes and when it ends (docs/agent.md); the
 * runs in between go to debug. rec NULL (no memory for it): every run is logged. */
static void log_report(struct pin_record *rec, int vmid, int r, const struct pin_report *rep) {
        char field[32], note[96] = "";
        snprintf(field, sizeof field, "VMID=%d", vmid);
        int cause = r > 0 ? (rep->failures[0].error ? rep->failures[0].error : -EIO) : r;
        unsigned failed = 0;
        enum repeat_event ev = cause ? REPEAT_STARTED : REPEAT_OK; /* no record: every failure is a first one */
        if (rec)
                ev = repeat_note(&rec->failures, cause, &failed);
        if (ev == REPEAT_ENDED)
                snprintf(note, sizeof note, "; it works again after %u failed runs", failed);
        else if (ev == REPEAT_CHANGED)
                snprintf(note, sizeof note, " (failing %u runs in a row; the cause changed)", failed);
        else if (ev == REPEAT_SAME)
                snprintf(note, sizeof note, " (failing %u runs in a row; logged again when that changes)", failed);
        enum log_level level = r == 0 ? LOG_LEVEL_INFO : LOG_LEVEL_ERROR;
        if (ev == REPEAT_SAME)
                level = LOG_LEVEL_DEBUG;
        log_run(level, field, vmid, r, rep, note);
}

/* Count and log a pinning run; record the pid when everything was pinned. */
static void note_run(struct pin_state *s, const struct pin_plan *plan, int r, const struct pin_report *rep) {
        bool complete = r == 0 && rep->vcpus_missing == 0;
        struct pin_record *rec = record_for(s, plan->vmid);
        if (complete && rec) {
                if (rec->pid != plan->pid) { /* a QEMU process pinned for the first time */
                        rec->rechecks = PIN_RECHECKS;
                        s->pending = true;
                }
                rec->pid = plan->pid;
                rec->seen_pid = plan->pid;
                rec->drift = 0;
        }
        if (r == -ENOENT || (r == 0 && rep->vcpus_missing > 0)) {
                s->pending = true; /* QEMU is still creating its vCPU threads: try again shortly */
                return;
        }
        if (complete)
                s->pins_ok++;
        else
                s->pin_failures++;
        if (rec)
                rec->failed_pid = complete ? 0 : plan->pid;
        log_report(rec, plan->vmid, r, rep);
}

/* Pin one VM with the vCPU threads QMP named (qmp_error 0), else with those /proc names. Returns
 * pinning_apply's result. */
static int pin_with(struct pin_state *s, const struct pin_plan *plan, int qmp_error, const int *qmp_tids,
                    unsigned qmp_n, struct pin_report *rep) {
        struct pin_vcpus vcpus = {0};
        int r = pinning_find_vcpus(live.proc_root, plan->pid, qmp_error, qmp_tids, qmp_n, &vcpus);
        if (r == 0)
                r = pinning_apply(plan, &vcpus, &live, rep);
        pinning_vcpus_done(&vcpus);
        note_run(s, plan, r, rep);
        return r;
}

static int ask_qmp(struct pin_state *s, const struct pin_env *env, int vmid, int pid) {
        char *path = NULL;
        if (!s->qmp)
                return -ENOTCONN;
        if (asprintf(&path, "%s/%d.qmp", env->run_dir, vmid) < 0)
                return -ENOMEM;
        int r = qmp_worker_ask(s->qmp, vmid, pid, path);
        free(path);
        return r;
}

/* Ask QMP for the VM's vCPU threads; its answer pins the VM (pin_service_answers). Without a worker, or
 * when the question cannot be queued, pin now with the threads /proc names. */
static void pin_vm(struct pin_state *s, const struct pin_env *env, int vmid) {
        struct pin_plan plan;
        struct cpuset *nodes = NULL;
        if (plan_for(env, vmid, &plan, &nodes) < 0)
                return;
        struct pin_record *rec = record_for(s, vmid);
        int r = rec && rec->asking_pid == plan.pid ? 0 : ask_qmp(s, env, vmid, plan.pid);
        if (r == 0 && rec)
                rec->asking_pid = plan.pid;
        if (r < 0) {
                struct pin_report rep;
                pin_with(s, &plan, r, NULL, 0, &rep);
        }
        cpuset_free(nodes);
}

static bool wants_pin(const struct pin_env *env, int vmid) {
        if (!env->pin)
                return false;
        const struct reservation *r = ledger_find_vmid(env->ledger, vmid);
        const struct vm *vm = inventory_find(env->inventory, vmid);
        return r && r->placement && vm && vm->running && vm->pid > 0;
}

static struct pin_record *find_record(const struct pin_state *s, int vmid) {
        for (size_t i = 0; i < s->n; i++)
                if (s->records[i].vmid == vmid)
                        return &s->records[i];
        return NULL;
}

static bool already_pinned(const struct pin_state *s, const struct pin_env *env, int vmid) {
        const struct vm *vm = inventory_find(env->inventory, vmid);
        const struct pin_record *rec = find_record(s, vmid);
        return vm && rec && rec->pid == vm->pid;
}

/* This QEMU process already failed to pin: leave it to the periodic repair. */
static bool failed_before(const struct pin_state *s, const struct pin_env *env, int vmid) {
        const struct vm *vm = inventory_find(env->inventory, vmid);
        const struct pin_record *rec = find_record(s, vmid);
        return vm && rec && rec->failed_pid == vm->pid;
}

void pin_service_vm_changed(struct pin_state *s, const struct pin_env *env, int vmid) {
        if (wants_pin(env, vmid) && !already_pinned(s, env, vmid) && !failed_before(s, env, vmid))
                pin_vm(s, env, vmid);
}

/* What /proc says of a VM's threads now was seen: the totals report it until the next look. */
static void note_drift(struct pin_state *s, int vmid, int pid, unsigned drift) {
        struct pin_record *rec = record_for(s, vmid);
        if (!rec)
                return;
        rec->seen_pid = pid;
        rec->drift = drift;
}

/* Look at the VM's threads in /proc now: how many are off their CPUs (0 when they cannot be read), remembered for
 * the totals; with ret_status, also the GET /v1/vms/{vmid} body (pinning_status; NULL when it cannot be made). */
static unsigned look(struct pin_state *s, const struct pin_env *env, int vmid, json_t **ret_status) {
        struct pin_plan plan;
        struct cpuset *nodes = NULL;
        json_t *real = NULL;
        unsigned drift = 0;
        if (plan_for(env, vmid, &plan, &nodes) == 0 && pinning_proc_read(live.proc_root, plan.pid, &real) == 0 &&
            pinning_drift(&plan, real, &drift) == 0) {
                note_drift(s, vmid, plan.pid, drift);
                if (ret_status)
                        pinning_status(&plan, real, ret_status);
        }
        json_decref(real);
        cpuset_free(nodes);
        return drift;
}

static unsigned vm_drift(struct pin_state *s, const struct pin_env *env, int vmid) {
        return look(s, env, vmid, NULL);
}

static void forget_gone(struct pin_state *s, const struct pin_env *env) {
        size_t kept = 0;
        for (size_t i = 0; i < s->n; i++)
                if (ledger_find_vmid(env->ledger, s->records[i].vmid))
                        s->records[kept++] = s->records[i];
        s->n = kept;
}

/* A VM pinned a moment ago: whether one of its rechecks is due and finds a thread off its CPUs. */
static bool recheck_drifted(struct pin_state *s, const struct pin_env *env, int vmid) {
        struct pin_record *rec = find_record(s, vmid);
        if (!rec || rec->rechecks == 0 || !already_pinned(s, env, vmid))
                return false;
        rec->rechecks--;
        return vm_drift(s, env, vmid) > 0;
}

void pin_service_scan(struct pin_state *s, const struct pin_env *env, enum pin_scan mode) {
        s->pending = false;
        forget_gone(s, env);
        for (size_t i = 0; i < env->ledger->n; i++) {
                int vmid = env->ledger->items[i]->vmid;
                if (!vmid || !wants_pin(env, vmid))
                        continue;
                bool due = mode == PIN_SCAN_REPAIR ? !already_pinned(s, env, vmid) || vm_drift(s, env, vmid) > 0
                           : (!already_pinned(s, env, vmid) && !failed_before(s, env, vmid)) ||
                                     (mode == PIN_SCAN_TICK && recheck_drifted(s, env, vmid));
                if (due)
                        pin_vm(s, env, vmid);
        }
        for (size_t i = 0; i < s->n; i++)
                if (s->records[i].rechecks > 0)
                        s->pending = true;
}

int pin_service_pin_now(struct pin_state *s, const struct pin_env *env, int vmid, json_t **ret_report) {
        if (!env->pin)
                return -EPERM;
        struct pin_plan plan;
        struct pin_report rep;
        struct cpuset *nodes = NULL;
        int r = plan_for(env, vmid, &plan, &nodes);
        if (r == 0)
                r = pin_with(s, &plan, PIN_QMP_NOT_ASKED, NULL, 0, &rep);
        cpuset_free(nodes);
        if (r < 0)
                return r;
        *ret_report = pinning_report_to_json(&rep);
        return *ret_report ? 0 : -ENOMEM;
}

json_t *pin_service_vm_status(struct pin_state *s, const struct pin_env *env, int vmid) {
        json_t *status = NULL;
        look(s, env, vmid, &status);
        return status;
}

/* The drift last seen of the VM's current QEMU; never seen: all its vCPU threads. */
static unsigned seen_drift(const struct pin_state *s, const struct pin_env *env, int vmid) {
        const struct pin_record *rec = find_record(s, vmid);
        const struct vm *vm = inventory_find(env->inventory, vmid);
        if (rec && vm && rec->seen_pid == vm->pid)
                return rec->drift;
        return ledger_find_vmid(env->ledger, vmid)->placement->n_vcpus; /* wants_pin: it is placed */
}

void pin_service_totals(const struct pin_state *s, const struct pin_env *env, struct pin_totals *ret) {
        struct pin_totals t = { 0 };
        for (size_t i = 0; i < env->ledger->n; i++) {
                int vmid = env->ledger->items[i]->vmid;
                if (!vmid || !wants_pin(env, vmid))
                        continue;
                unsigned drift = seen_drift(s, env, vmid);
                t.wanted++;
                t.pinned += already_pinned(s, env, vmid) && drift == 0;
                t.drift += drift;
        }
        *ret = t;
}

/* ---- the QMP worker ---- */

int pin_service_start(struct pin_state *s) {
        return s->qmp ? 0 : qmp_worker_start(PINNING_QMP_TIMEOUT_MS, &s->qmp);
}

void pin_service_stop(struct pin_state *s) {
        qmp_worker_free(s->qmp);
        s->qmp = NULL;
        for (size_t i = 0; i < s->n; i++)
                s->records[i].asking_pid = 0; /* those answers are dropped */
}

int pin_service_fd(const struct pin_state *s) {
        return s->qmp ? qmp_worker_fd(s->qmp) : -1;
}

/* QMP answered about a VM: pin it, unless it no longer wants pinning or its QEMU changed meanwhile. */
static void on_answer(struct pin_state *s, const struct pin_env *env, const struct qmp_answer *ans) {
        struct pin_record *rec = find_record(s, ans->vmid);
        if (rec && rec->asking_pid == ans->pid)
                rec->asking_pid = 0;
        struct pin_plan plan;
        struct cpuset *nodes = NULL;
        if (!wants_pin(env, ans->vmid) || plan_for(env, ans->vmid, &plan, &nodes) < 0)
                return;
        if (plan.pid == ans->pid) {
                struct pin_report rep;
                if (ans->error)
                        log_debug("vm %d: QMP gave no vCPU threads (%s), reading /proc", ans->vmid,
                                  strerror(-ans->error));
                pin_with(s, &plan, ans->error, ans->tids, ans->n, &rep);
        } else {
                s->pending = true; /* QEMU restarted while we asked: the next tick asks the new one */
        }
        cpuset_free(nodes);
}

void pin_service_answers(struct pin_state *s, const struct pin_env *env) {
        struct qmp_answer ans;
        while (s->qmp && qmp_worker_take(s->qmp, &ans) > 0) {
                on_answer(s, env, &ans);
                free(ans.tids);
        }
}

void pin_state_done(struct pin_state *s) {
        qmp_worker_free(s->qmp);
        free(s->records);
        memset(s, 0, sizeof *s);
}
