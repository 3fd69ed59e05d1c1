/* latency: per NodeClaim start latency, split into API waits and the coordinator's own time. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "latency.h"

#include "array.h"
#include "fiber.h"
#include "http_client.h"
#include "monotime.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LATENCY_FORGET_MS (60L * 60 * 1000) /* a claim never started (failed, deleted) is dropped after this */

struct latency_entry {
        char *claim;
        int64_t origin_ms, handoff_own_ms;
        struct latency_waits waits;
};

struct latency {
        pthread_mutex_t mu;
        struct latency_entry *items;
        size_t n, cap;
};

/* Each thread keeps its /proc/thread-self/schedstat open (closed when the thread ends): one pread per look. */
static pthread_key_t schedstat_key;
static pthread_once_t schedstat_once = PTHREAD_ONCE_INIT;

static void schedstat_close(void *p) {
        close((int)(intptr_t)p - 1);
}

static void schedstat_key_new(void) {
        pthread_key_create(&schedstat_key, schedstat_close);
}

static int schedstat_fd(void) {
        pthread_once(&schedstat_once, schedstat_key_new);
        intptr_t v = (intptr_t)pthread_getspecific(schedstat_key); /* fd + 1; 0 = not open yet */
        if (v > 0)
                return (int)v - 1;
        int fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
        if (fd >= 0 && pthread_setspecific(schedstat_key, (void *)(intptr_t)(fd + 1)) != 0) {
                close(fd);
                fd = -1;
        }
        return fd;
}

/* How long this thread has been runnable but waiting for a CPU (the second field of schedstat). */
static int64_t run_delay_us(void) {
        char buf[96];
        uint64_t cpu_ns, delay_ns;
        int fd = schedstat_fd();
        ssize_t n = fd >= 0 ? pread(fd, buf, sizeof buf - 1, 0) : -1;
        if (n <= 0)
                return 0;
        buf[n] = '\0';
        return sscanf(buf, "%" SCNu64 " %" SCNu64, &cpu_ns, &delay_ns) == 2 ? (int64_t)(delay_ns / 1000) : 0;
}

/* In a task (fiber.h), the time it was ready to run while other tasks had the thread stands for the time a
 * thread is runnable without a CPU. */
void latency_waits_now(struct latency_waits *ret) {
        struct fiber *f = fiber_self();
        *ret = (struct latency_waits){ http_client_thread_wait_us(), f ? fiber_ready_us(f) : run_delay_us() };
}

void latency_waits_since(const struct latency_waits *start, struct latency_waits *ret) {
        struct latency_waits now;
        latency_waits_now(&now);
        *ret = (struct latency_waits){ now.api_us - start->api_us, now.cpu_us - start->cpu_us };
}

int latency_new(struct latency **ret) {
        struct latency *l = calloc(1, sizeof *l);
        if (!l)
                return -ENOMEM;
        pthread_mutex_init(&l->mu, NULL);
        *ret = l;
        return 0;
}

void latency_free(struct latency *l) {
        if (!l)
                return;
        for (size_t i = 0; i < l->n; i++)
                free(l->items[i].claim);
        free(l->items);
        pthread_mutex_destroy(&l->mu);
        free(l);
}

static struct latency_entry *find(struct latency *l, const char *claim) {
        for (size_t i = 0; i < l->n; i++)
                if (strcmp(l->items[i].claim, claim) == 0)
                        return &l->items[i];
        return NULL;
}

static void remove_at(struct latency *l, size_t i) {
        free(l->items[i].claim);
        l->items[i] = l->items[--l->n];
}

static void forget_old(struct latency *l, int64_t now_ms) {
        for (size_t i = 0; i < l->n;)
                if (now_ms - l->items[i].origin_ms > LATENCY_FORGET_MS)
                        remove_at(l, i);
                else
                        i++;
}

static int append(struct latency *l, const char *claim, int64_t origin_ms, const struct latency_waits *w) {
        if (ARRAY_GROW(&l->items, &l->cap, l->n, 64) < 0)
                return -ENOMEM;
        char *name = strdup(claim);
        if (!name)
                return -ENOMEM;
        l->items[l->n++] = (struct latency_entry){ .claim = name, .origin_ms = origin_ms, .waits = *w };
        return 0;
}

void latency_begin(struct latency *l, const char *claim, int64_t origin_ms, const struct latency_waits *w) {
        if (!l || !claim)
                return;
        int64_t now = monotime_ms();
        pthread_mutex_lock(&l->mu);
        forget_old(l, now);
        struct latency_entry *e = find(l, claim);
        if (e) {
                e->origin_ms = origin_ms;
                e->waits = *w;
        } else if (append(l, claim, origin_ms, w) == 0) { /* accounting only: ENOMEM loses one sample */
                e = &l->items[l->n - 1];
        }
        if (e)
                e->handoff_own_ms = now - origin_ms - w->api_us / 1000;
        pthread_mutex_unlock(&l->mu);
}

void latency_add_wait(struct latency *l, const char *claim, const struct latency_waits *w) {
        if (!l || !claim)
                return;
        pthread_mutex_lock(&l->mu);
        struct latency_entry *e = find(l, claim);
        if (e) {
                e->waits.api_us += w->api_us;
                e->waits.cpu_us += w->cpu_us;
        }
        pthread_mutex_unlock(&l->mu);
}

int latency_finish(struct latency *l, const char *claim, int64_t now_ms, const struct latency_waits *extra,
                   struct latency_report *ret) {
        int r = -ENOENT;
        if (!l || !claim)
                return r;
        pthread_mutex_lock(&l->mu);
        struct latency_entry *e = find(l, claim);
        if (e) {
                *ret = (struct latency_report){ now_ms - e->origin_ms, (e->waits.api_us + extra->api_us) / 1000,
                                                (e->waits.cpu_us + extra->cpu_us) / 1000, e->handoff_own_ms };
                remove_at(l, (size_t)(e - l->items));
                r = 0;
        }
        pthread_mutex_unlock(&l->mu);
        return r;
}
