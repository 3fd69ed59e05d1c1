/* reghealth: a NodePool's NodeRegistrationHealthy condition as Karpenter keeps it: the last launch results, and
 * the status patches that set the condition. Pure. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#define REGHEALTH_CONDITION "NodeRegistrationHealthy"
#define REGHEALTH_BUFFER 4 /* Karpenter's nodepoolhealth.BufferSize */
#define REGHEALTH_REASON_FAILED "RegistrationFailed"

/* The last REGHEALTH_BUFFER launch results of one pool, for one generation of the pool and of its node class. */
struct reghealth {
        bool results[REGHEALTH_BUFFER];
        size_t n, next;
        int64_t pool_generation, class_generation;
};

enum reghealth_status { REGHEALTH_UNKNOWN, REGHEALTH_HEALTHY, REGHEALTH_UNHEALTHY };

/* Empties h when it was kept for other generations (the pool or its class changed), and keeps these. */
void reghealth_track(struct reghealth *h, int64_t pool_generation, int64_t class_generation);
void reghealth_add(struct reghealth *h, bool success);
/* Unknown when empty; unhealthy when at least half of REGHEALTH_BUFFER results are failures; else healthy. */
enum reghealth_status reghealth_status(const struct reghealth *h);
/* The status h would have with one more result (Karpenter's DryRun). */
enum reghealth_status reghealth_status_with(const struct reghealth *h, bool success);

/* The pool's NodeRegistrationHealthy status ("True", "False", "Unknown"), or NULL when it has none. */
const char *reghealth_condition_status(const json_t *pool);
/* Whether the condition must go back to Unknown: missing, or computed for another metadata.generation of the pool
 * or (status.nodeClassObservedGeneration) another generation of its node class. */
bool reghealth_stale(const json_t *pool, int64_t class_generation);

/* A merge patch of the pool's status that sets NodeRegistrationHealthy to status/reason/message (the other
 * conditions kept; lastTransitionTime now_ms when the status changes), with observedGeneration the pool's and
 * nodeClassObservedGeneration class_generation. NULL on ENOMEM. */
json_t *reghealth_patch(const json_t *pool, const char *status, const char *reason, const char *message,
                        int64_t class_generation, int64_t now_ms);
