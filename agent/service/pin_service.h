/* pin_service: when to pin: VMs bound to a placed reservation, under the static policy, on every (re)start. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include "repeat.h"

#include <jansson.h>
#include <stdbool.h>

struct inventory;
struct ledger;
struct qmp_worker;

/* What the service remembers of one VM: the QEMU pid it last pinned fully. */
struct pin_record {
        int vmid;
        int pid;        /* fully pinned */
        int failed_pid; /* pinning failed for this QEMU: retried only by the periodic repair, not on every change */
        int asking_pid; /* a QMP question about this QEMU is with the worker: its answer pins it */
        unsigned rechecks; /* timer ticks left in which a freshly pinned QEMU is checked again: threads created as
                            * it starts running (KVM's NX huge page recovery worker) inherit their creator's mask */
        struct repeat failures; /* failed runs in a row and their cause: logged when they start, change, end */
        int seen_pid;   /* the QEMU whose threads' affinity was last looked at (0: none yet)... */
        unsigned drift; /* ...and how many of them were off their CPUs then: what /metrics says */
};

struct pin_state {
        size_t n;
        struct pin_record *records;
        bool pending;                  /* a VM needs pinning but its threads were not all there yet, or a
                                        * freshly pinned one is to be checked again */
        unsigned long long pins_ok;    /* pinning_apply runs that pinned everything */
        unsigned long long pin_failures; /* runs with failed threads or errors */
        struct qmp_worker *qmp;        /* asks QMP off the event loop; NULL: vCPU threads from /proc only */
};

/* What the service reads of the rest of the agent: the reservations and VMs it pins by, where QEMU's QMP sockets
 * are, and whether the policy pins at all. The agent builds one from its state for each call (agent_pin_env); the
 * service keeps none of it. */
struct pin_env {
        const struct ledger *ledger;
        const struct inventory *inventory;
        const char *run_dir; /* <vmid>.qmp */
        bool pin;            /* node policy static: bound VMs are pinned */
};

/* Start and stop the QMP worker thread (the daemon, around its loop). 0 or -errno. */
int pin_service_start(struct pin_state *s);
void pin_service_stop(struct pin_state *s);
/* Readable when QMP answers wait: then call pin_service_answers(), which pins with them. */
int pin_service_fd(const struct pin_state *s);
void pin_service_answers(struct pin_state *s, const struct pin_env *env);

/* A VM's config, run state or binding changed: pin it if it is bound, running under a QEMU pid that was not
 * pinned yet, and the policy is static. The pinning itself follows QMP's answer (pin_service_answers). */
void pin_service_vm_changed(struct pin_state *s, const struct pin_env *env, int vmid);

enum pin_scan {
        PIN_SCAN_NEW,    /* pin new QEMU processes (starts, restarts) */
        PIN_SCAN_TICK,   /* that, and check the VMs pinned in the last few ticks again */
        PIN_SCAN_REPAIR, /* that, and re-pin every VM whose real affinity drifted from the wanted one */
};

/* Look at every bound VM as the mode says, and ask QMP about those to pin. Forget records of VMs that are gone. */
void pin_service_scan(struct pin_state *s, const struct pin_env *env, enum pin_scan mode);

/* POST /v1/vms/{vmid}/pin: pin now whatever was pinned before, with the vCPU threads /proc names (it does not
 * wait for QMP). 0 with a report; -ENOENT not bound to a placed reservation, -ESRCH not running, -EPERM policy
 * is simple; other negative errno from pinning. */
int pin_service_pin_now(struct pin_state *s, const struct pin_env *env, int vmid, json_t **ret_report);

/* {"wanted", "real", "drift"} for a bound, running VM, read now from /proc (and remembered for the totals); NULL
 * otherwise. */
json_t *pin_service_vm_status(struct pin_state *s, const struct pin_env *env, int vmid);

struct pin_totals {
        unsigned wanted; /* running VMs bound to a placed reservation: the agent wants them pinned */
        unsigned pinned; /* of those, the ones whose current QEMU a pin run pinned completely and whose every thread
                          * is on its CPUs now */
        unsigned drift;  /* threads of the wanted VMs whose real affinity differs from the wanted one (or is missing) */
};

/* The totals over all bound running VMs as last looked at: the drift each pinning run, periodic repair scan
 * (--pin-interval), recheck and status read found; no /proc read (a scrape is cheap). A VM whose current QEMU was
 * never looked at counts its vCPU threads as drifted. */
void pin_service_totals(const struct pin_state *s, const struct pin_env *env, struct pin_totals *ret);

void pin_state_done(struct pin_state *s);
