/* options: the controller's own flags (--launch, --leader-elect, --disruption, --node-repair, --workers), taken out of
 * argv before config. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "options.h"
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum option_id { OPT_LAUNCH, OPT_LEADER_ELECT, OPT_DISRUPTION, OPT_NODE_REPAIR, OPT_WORKERS };

struct option_def {
        enum option_id id;
        const char *flag, *env;
        bool boolean;
};

static const struct option_def DEFS[] = {
        { OPT_LAUNCH, "launch", "LAUNCH", true },
        { OPT_LEADER_ELECT, "leader-elect", "LEADER_ELECT", true },
        { OPT_DISRUPTION, "disruption", "DISRUPTION", true },
        { OPT_NODE_REPAIR, "node-repair", "NODE_REPAIR", true },
        { OPT_WORKERS, "workers", "WORKERS", false },
};

#define N_DEFS (sizeof DEFS / sizeof DEFS[0])

void options_init(struct options *o) {
        *o = (struct options){ .launch = true, .leader_elect = true, .disruption = true, .workers = OPTIONS_DEFAULT_WORKERS };
}

static int parse_bool(const char *s, bool *ret) {
        static const char *const yes[] = { "true", "1", "yes" }, *const no[] = { "false", "0", "no" };
        for (size_t i = 0; i < 3; i++) {
                if (strcmp(s, yes[i]) == 0) {
                        *ret = true;
                        return 0;
                }
                if (strcmp(s, no[i]) == 0) {
                        *ret = false;
                        return 0;
                }
        }
        return -EINVAL;
}

static int apply(struct options *o, const struct option_def *d, const char *name, const char *value, char *err,
                 size_t errlen) {
        if (d->boolean) {
                bool b;
                if (parse_bool(value, &b) < 0) {
                        snprintf(err, errlen, "%s: expected true or false (got \"%s\")", name, value);
                        return -EINVAL;
                }
                bool *flags[] = { [OPT_LAUNCH] = &o->launch, [OPT_LEADER_ELECT] = &o->leader_elect,
                                  [OPT_DISRUPTION] = &o->disruption, [OPT_NODE_REPAIR] = &o->node_repair };
                *flags[d->id] = b;
                return 0;
        }
        char *end;
        long v = strtol(value, &end, 10);
        if (!*value || *end || v < 1 || v > OPTIONS_MAX_WORKERS) {
                snprintf(err, errlen, "%s: expected a number from 1 to %d (got \"%s\")", name, OPTIONS_MAX_WORKERS, value);
                return -EINVAL;
        }
        o->workers = (unsigned)v;
        return 0;
}

/* The definition arg names ("--launch", "-launch=x"), or NULL; *ret_value: the text after '=' or NULL. */
static const struct option_def *match(const char *arg, const char **ret_value) {
        if (arg[0] != '-')
                return NULL;
        const char *name = arg + (arg[1] == '-' ? 2 : 1);
        const char *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        for (size_t i = 0; i < N_DEFS; i++)
                if (strlen(DEFS[i].flag) == len && strncmp(DEFS[i].flag, name, len) == 0) {
                        *ret_value = eq ? eq + 1 : NULL;
                        return &DEFS[i];
                }
        return NULL;
}

/* Apply argv[*i]; *used = how many arguments it took. */
static int one_flag(struct options *o, const struct option_def *d, const char *value, int argc, char **argv, int i,
                    int *used, char *err, size_t errlen) {
        char name[64];
        bool b;
        snprintf(name, sizeof name, "--%s", d->flag);
        *used = 1;
        if (!value && d->boolean && i + 1 < argc && parse_bool(argv[i + 1], &b) == 0) {
                value = argv[i + 1];
                *used = 2;
        } else if (!value && d->boolean) {
                value = "true";
        } else if (!value && i + 1 < argc) {
                value = argv[i + 1];
                *used = 2;
        } else if (!value) {
                snprintf(err, errlen, "%s: needs a value", name);
                return -EINVAL;
        }
        return apply(o, d, name, value, err, errlen);
}

int options_parse(struct options *o, int *argc, char **argv, const char *const *envp, char *err, size_t errlen) {
        for (size_t k = 0; k < N_DEFS; k++) {
                const char *v = config_env_value(envp, DEFS[k].env);
                if (v && *v && apply(o, &DEFS[k], DEFS[k].env, v, err, errlen) < 0)
                        return -EINVAL;
        }
        int out = 1;
        for (int i = 1; i < *argc;) {
                const char *value;
                const struct option_def *d = match(argv[i], &value);
                int used;
                if (!d) {
                        argv[out++] = argv[i++];
                        continue;
                }
                if (one_flag(o, d, value, *argc, argv, i, &used, err, errlen) < 0)
                        return -EINVAL;
                i += used;
        }
        argv[out] = NULL;
        *argc = out;
        return 0;
}

const char *options_usage(void) {
        return "Controller flags:\n"
               "  --launch[=BOOL]             [LAUNCH] launch VMs for NodeClaims (true); false stops after the claims\n"
               "                              are created (the launcher is not run)\n"
               "  --leader-elect[=BOOL]       [LEADER_ELECT] hold the Lease pvescale-coordinator before acting (true);\n"
               "                              the Lease lives in POD_NAMESPACE (else the kubeconfig's namespace) and\n"
               "                              the identity is POD_NAME (else the host name)\n"
               "  --disruption[=BOOL]         [DISRUPTION] scale down: delete or replace nodes that are empty,\n"
               "                              underused, drifted or expired, by the NodePools' disruption settings\n"
               "                              (true; needs --launch, whose finalizer drains and removes them)\n"
               "  --node-repair[=BOOL]        [NODE_REPAIR] replace nodes NotReady or Unknown for 15 min (false)\n"
               "  --workers N                 [WORKERS] launcher worker threads (64)\n";
}
