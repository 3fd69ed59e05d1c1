/* nodeclaim: a NodeClaim's status as a typed struct (decoded from JSON once, encoded back as what changed), and
 * its placement as the provisioner plans it and the launcher records it (host, region, shape). Pure. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "launcher_plan.h"
#include "resources.h"
#include "shapes.h"

/* Where a launch is (status.launchStep): the state a claim is in once the step of that name is done. The names
 * are an API: tests, docs and operators read them. */
enum nodeclaim_step {
        NODECLAIM_STEP_NONE,           /* "" or absent: not begun */
        NODECLAIM_STEP_RESERVED,       /* "Reserved": room reserved on the host (its agent, or PVE accounting) */
        NODECLAIM_STEP_VMID_ALLOCATED, /* "VMIDAllocated": a VMID picked for the clone */
        NODECLAIM_STEP_CLONING,        /* "Cloning": the clone task runs */
        NODECLAIM_STEP_CONFIGURED,     /* "Configured": cloned, boot disk resized, cloud-init uploaded, config and
                                        * firewall set; never written on its own */
        NODECLAIM_STEP_STARTED,        /* "Started": the VM runs, its reservation is not bound yet */
        NODECLAIM_STEP_LAUNCHED,       /* "Launched": started and bound */
        NODECLAIM_STEP_REGISTERED,     /* "Registered": its Node is there, labelled and tainted */
        NODECLAIM_STEP_INITIALIZED,    /* "Initialized": its Node is ready; the join token and ISO are gone */
        NODECLAIM_STEP_FAILED,         /* "Failed": the launch failed for good */
};

/* How far the termination of a claim being deleted is (status.terminationStep): the state once the step of that
 * name is done. Each is recorded once done, so that a restarted coordinator goes on from there. */
enum nodeclaim_term {
        NODECLAIM_TERM_NONE,         /* "" or absent: not begun */
        NODECLAIM_TERM_TAINTED,      /* "Tainted": the Node carries pvescale.io/disrupted:NoSchedule;
                                      * terminationStartedAt set; its pods are being evicted */
        NODECLAIM_TERM_DRAINED,      /* "Drained": only pods that stay (DaemonSet, mirror, tolerating) are left */
        NODECLAIM_TERM_NODE_DELETED, /* "NodeDeleted": the Node object is gone */
        NODECLAIM_TERM_INSTANCE_TERMINATED, /* "InstanceTerminated": VM, ISO, join token and reservation gone */
};

/* The recorded name of a termination step ("" for NODECLAIM_TERM_NONE). */
const char *nodeclaim_term_name(enum nodeclaim_term term);

/* The recorded name of a step ("" for NODECLAIM_STEP_NONE). */
const char *nodeclaim_step_name(enum nodeclaim_step step);
/* A recorded name back ("" is NODECLAIM_STEP_NONE). 0, or -EINVAL for a name that is no step. */
int nodeclaim_step_parse(const char *name, enum nodeclaim_step *ret);

/* status.reservationMode: who reserved the claim's room. */
enum nodeclaim_reservation {
        NODECLAIM_RESERVATION_NONE,
        NODECLAIM_RESERVATION_AGENT, /* "agent": the host's agent (reservationID names the reservation) */
        NODECLAIM_RESERVATION_PVE,   /* "pve": PVE accounting, without an agent */
};

/* On a claim launched to replace others (a disruption's replace, coordinator/control/disruption.c): their names,
 * comma-separated. Here, below control/, so that the launcher can tell such a claim's VM from a provisioning one. */
#define NODECLAIM_ANNOTATION_REPLACES "pvescale.io/replaces"
/* Set by the provisioner: the claims of the same round (comma-separated names) whose Nodes take pods first. The
 * launcher leaves this claim's Node tainted unregistered until each is gone, being deleted or Initialized, and
 * NODECLAIM_HOLD_MAX_MS at most after the launch began, so that kube-scheduler cannot give this Node's room to the
 * pods planned on theirs (docs/coordinator.md, "Provisioning and events"). */
#define NODECLAIM_ANNOTATION_AFTER "pvescale.io/after-nodeclaims"
/* Set by the provisioner: the other claims of the same round (comma-separated names, as many as fit in 1 KiB). The
 * launcher leaves this claim's Node tainted unregistered until the Node of each has registered (or the claim is
 * gone, being deleted, or Initialized), NODECLAIM_ROUND_MAX_MS at most after the launch began, then nominates the
 * pods planned on every one of them to its Node: all of the round's Nodes are there, with their pods' room kept by
 * kube-scheduler, before the first one takes pods (docs/coordinator.md, "Nominations"). */
#define NODECLAIM_ANNOTATION_ROUND "pvescale.io/round-nodeclaims"
#define NODECLAIM_REASON_NOMINATED "Nominated" /* the provisioner's event on a pod planned onto a claim */
#define NODECLAIM_HOLD_MAX_MS 120000
#define NODECLAIM_ROUND_MAX_MS 30000

#define NODECLAIM_MAX_CONDITIONS 16
#define NODECLAIM_MESSAGE_MAX 512

/* One of status.conditions. */
struct nodeclaim_condition {
        char type[32];
        char status[8]; /* "True", "False" or "Unknown" */
        char reason[64];
        char message[NODECLAIM_MESSAGE_MAX];
        int64_t transition_ms; /* lastTransitionTime; 0 when absent */
};

/* status.placement: the agent's NUMA placement of the reservation ({numa: [...], cpus}). */
struct nodeclaim_placement {
        bool set;
        struct launcher_numa numa[LAUNCHER_MAX_NUMA];
        size_t n_numa;
        char cpus[1024]; /* the host CPUs, a cpulist; "" when the agent gave none */
};

/* Every status field the launcher reads or writes; an empty string, a 0 or an all-zero member means absent.
 * Fields the launcher does not know stay in the JSON (encoding changes only the members that changed). */
struct nodeclaim_status {
        enum nodeclaim_step launch_step;            /* launchStep */
        char host[128], region[128];                /* host, region: the claim's place */
        struct resources capacity, allocatable;     /* capacity, allocatable: of the claim's shape */
        enum nodeclaim_reservation reservation;     /* reservationMode */
        char reservation_id[64];                    /* reservationID (agent mode) */
        struct nodeclaim_placement placement;       /* placement */
        uint32_t vmid;                              /* vmid */
        char provider_id[300];                      /* providerID: proxmox://<region>/<vmid> */
        int64_t clone_started_ms;                   /* cloneStartedAt: when the VMID was first picked */
        char clone_task[256];                       /* cloneTask: the UPID of a clone that runs */
        char image_id[160];                         /* imageID: "<host>/<template VMID>" */
        char image_digest[72];                      /* imageDigest: the template's config digest at the clone */
        char ipconfig[1024];                        /* ipconfig: static addresses (ipam.h), with the VMID */
        char iso_volume[200];                       /* isoVolume: the cloud-init ISO until the Node is initialized */
        char token_id[16];                          /* tokenID: the join token until the Node is initialized */
        int64_t started_ms;                         /* startedAt */
        char node_name[254];                        /* nodeName */
        int64_t attempts;                           /* attempts: failed attempts of the current step */
        char last_error[NODECLAIM_MESSAGE_MAX];     /* lastError */
        char failure_reason[64];                    /* failureReason (Failed) */
        enum nodeclaim_term term_step;              /* terminationStep: how far the termination is */
        int64_t term_started_ms;                    /* terminationStartedAt: when the termination began */
        struct nodeclaim_condition conditions[NODECLAIM_MAX_CONDITIONS]; /* conditions */
        size_t n_conditions;
};

/* Decode a status object (NULL: an empty status). *ret is always written: on -EINVAL it holds every field that
 * decoded (the others empty), and err says which did not ("status.vmid: an integer of 0 to 4294967295 is
 * required"); a value that does not fit its member counts as malformed. */
int nodeclaim_status_decode(const json_t *status, struct nodeclaim_status *ret, char *err, size_t errlen);

/* Apply to status (a JSON object, the one base was decoded from) every field in which st differs from base: set,
 * or removed when st has it empty. A condition that differs is set as launcher_condition_set does (now_ms is its
 * lastTransitionTime when its status changes). Keys the struct does not know are left as they are. 0 or -ENOMEM. */
int nodeclaim_status_encode(const struct nodeclaim_status *base, const struct nodeclaim_status *st, json_t *status,
                            int64_t now_ms);


/* Someone else wrote the status meanwhile (fresh): st becomes fresh with st's own changes against base on top. */
void nodeclaim_status_rebase(const struct nodeclaim_status *base, struct nodeclaim_status *st,
                             const struct nodeclaim_status *fresh);

/* The condition of this type, or NULL. */
const struct nodeclaim_condition *nodeclaim_condition(const struct nodeclaim_status *st, const char *type);
bool nodeclaim_condition_true(const struct nodeclaim_status *st, const char *type);
/* Set a condition (added when missing; its lastTransitionTime is the encoder's). 0, or -ENOSPC when the list is
 * full, -EINVAL when a text does not fit. */
int nodeclaim_condition_set(struct nodeclaim_status *st, const char *type, const char *cstatus, const char *reason,
                            const char *message);

/* The claim's place and the shape's capacity and allocatable (region may be NULL). */
void nodeclaim_set_placement(struct nodeclaim_status *st, const char *host, const char *region,
                             const struct shape *shape);

/* nodeclaim_status_decode of a claim's status. */
int nodeclaim_claim_status(const json_t *claim, struct nodeclaim_status *ret, char *err, size_t errlen);
/* The step a claim records (NODECLAIM_STEP_NONE when it records none, or none that decodes). */
enum nodeclaim_step nodeclaim_claim_step(const json_t *claim);
/* The PVE host a claim is planned on: status.host, else its zone requirement; NULL when neither. */
const char *nodeclaim_host(const json_t *claim);
/* Its PVE cluster: status.region, else its region requirement; NULL when neither. */
const char *nodeclaim_region(const json_t *claim);
/* Is the claim a replacement (a non-empty NODECLAIM_ANNOTATION_REPLACES)? */
bool nodeclaim_is_replacement(const json_t *claim);
/* The placement status from its parts (region may be NULL): host, region, capacity and allocatable of the shape;
 * what the launcher records with its first status write. New reference. */
json_t *nodeclaim_placement_status(const char *host, const char *region, const struct shape *shape);
