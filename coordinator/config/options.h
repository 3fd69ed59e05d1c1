/* options: the controller's own flags (--launch, --leader-elect, --disruption, --node-repair, --workers), taken out of
 * argv before config. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#define OPTIONS_DEFAULT_WORKERS 64
#define OPTIONS_MAX_WORKERS 256

struct options {
        bool launch;       /* --launch / LAUNCH (default true): false stops after NodeClaims are created */
        bool leader_elect; /* --leader-elect / LEADER_ELECT (default true) */
        bool disruption;   /* --disruption / DISRUPTION (default true): scale down (with --launch) */
        bool node_repair;  /* --node-repair / NODE_REPAIR (default false) */
        unsigned workers;  /* --workers / WORKERS (default 4): launcher worker threads */
};

void options_init(struct options *o);

/* Apply the environment (LAUNCH, LEADER_ELECT, DISRUPTION, NODE_REPAIR, WORKERS), then remove the flags above from argv (in place,
 * *argc updated) and apply them: "--launch", "--launch=false", "--launch false" (the next argument is taken
 * only when it is a boolean), "--workers 8", "--workers=8"; one leading dash works too. Other arguments are
 * left for config_load. Booleans: true/false/1/0/yes/no. On a bad value -EINVAL with "--flag: reason" (or
 * "NAME: reason") in err. Pure. */
int options_parse(struct options *o, int *argc, char **argv, const char *const *envp, char *err, size_t errlen);

/* Help text for these flags (static). */
const char *options_usage(void);
