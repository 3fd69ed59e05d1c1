/* fiber: cooperative tasks on one thread (ucontext stacks), whose transfers a libcurl multi handle drives through
 * its socket interface and epoll, so each wake costs what its own sockets cost, not what all transfers do. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "fiber.h"
#include "array.h"
#include "monotime.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define ASAN_START(save, bottom, size) __sanitizer_start_switch_fiber(save, bottom, size)
#define ASAN_FINISH(save, bottom, size) __sanitizer_finish_switch_fiber(save, bottom, size)
#else
#define ASAN_START(save, bottom, size) ((void)(save), (void)(bottom), (void)(size))
#define ASAN_FINISH(save, bottom, size) ((void)(save), (void)(bottom), (void)(size))
#endif

#define FIBER_STACK_SIZE ((size_t)1 << 20) /* mapped lazily: a task touches a few pages */
#define FIBER_EVENTS 64
/* Idle connections kept (libcurl's default is 4 per transfer running, so a burst's connections were closed as
 * it ended and set up again, TLS handshake and all, by the next one). */
#define FIBER_MAX_CONNECTIONS 512L

enum fiber_state { F_READY, F_RUNNING, F_TRANSFER, F_SLEEP, F_PARKED, F_DONE };

struct fiber {
        struct fiber_sched *s;
        ucontext_t ctx;
        char *map;           /* guard page, then the stack */
        fiber_fn fn;
        void *data;
        enum fiber_state state;
        bool wake_pending;   /* a fiber_wake that came while it was not parked */
        int64_t due_us;      /* F_SLEEP: when it is over */
        int64_t ready_at_us; /* when it last became ready */
        CURLcode result;
        CURL *transfer;              /* F_TRANSFER: the handle in the multi */
        const atomic_bool *cancel;   /* F_TRANSFER: ends it when true (fiber_perform_cancelable) */
        int64_t done_us;
        int64_t wait_us, ready_us;
        void *asan_fake;
};

struct fiber_sched {
        pthread_mutex_t mu; /* states, ready and wake_pending (fiber_wake comes from any thread) */
        CURLM *multi;
        int epoll_fd, wake_fd;
        int64_t curl_due_us; /* when libcurl wants its timeout action; 0 = never */
        ucontext_t main;
        struct fiber *current;
        struct fiber **alive;
        size_t n_alive, cap_alive;
        struct fiber **sleeping; /* the F_SLEEP ones, so a step looks at them and not at every task; room for
                                  * all alive tasks, so that a sleep never needs memory */
        size_t n_sleeping, cap_sleeping;
        struct fiber **ready, **running; /* ready, and the ones of it being run now */
        size_t n_ready, cap_ready, cap_running;
        char **stacks; /* free stacks */
        size_t n_stacks, cap_stacks;
        unsigned char *parked; /* parked[fd]: epoll still watches it, libcurl does not (see on_socket) */
        size_t cap_parked;
        const void *main_bottom;
        size_t main_size;
};

static _Thread_local struct fiber_sched *tl_sched;

static size_t page_size(void) {
        long p = sysconf(_SC_PAGESIZE);
        return p > 0 ? (size_t)p : 4096;
}

static bool is_parked(const struct fiber_sched *s, int fd) {
        return fd >= 0 && (size_t)fd < s->cap_parked && s->parked[fd];
}

static void unpark(struct fiber_sched *s, int fd) {
        if (is_parked(s, fd))
                s->parked[fd] = 0;
}

static int park(struct fiber_sched *s, int fd) {
        if (fd < 0)
                return -EBADF;
        while ((size_t)fd >= s->cap_parked) {
                size_t old = s->cap_parked;
                if (ARRAY_GROW(&s->parked, &s->cap_parked, old, 64) < 0)
                        return -ENOMEM;
                memset(s->parked + old, 0, s->cap_parked - old);
        }
        s->parked[fd] = 1;
        return 0;
}

/* libcurl: watch fd for what (CURL_POLL_*), or stop watching it. A socket libcurl stops watching is mostly a
 * connection going idle in its cache, soon taken by the next transfer: it stays in epoll, parked, so that its next
 * transfer costs one MOD, not a DEL now and an ADD then; an event on a parked socket (the server closed it) drops
 * it from epoll then, and a closed socket leaves epoll by itself. A socket epoll watches for libcurl carries a mark
 * (curl_multi_assign), so a change is one MOD too. */
static int on_socket(CURL *h, curl_socket_t fd, int what, void *userdata, void *socketp) {
        (void)h;
        struct fiber_sched *s = userdata;
        if (what == CURL_POLL_REMOVE) {
                if (park(s, fd) < 0)
                        epoll_ctl(s->epoll_fd, EPOLL_CTL_DEL, fd, NULL); /* fails when closed already: fine */
                return 0; /* libcurl forgets the mark with the socket */
        }
        bool watched = socketp || is_parked(s, fd);
        struct epoll_event ev = { .events = ((what & CURL_POLL_IN) ? EPOLLIN : 0) |
                                            ((what & CURL_POLL_OUT) ? EPOLLOUT : 0),
                                  .data.fd = fd };
        unpark(s, fd);
        int r = epoll_ctl(s->epoll_fd, watched ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &ev);
        if (r < 0 && errno == (watched ? ENOENT : EEXIST)) /* epoll and our marks disagree: trust epoll */
                r = epoll_ctl(s->epoll_fd, watched ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, fd, &ev);
        if (r < 0)
                return -1;
        if (!socketp)
                curl_multi_assign(s->multi, fd, s);
        return 0;
}

/* libcurl: call it back with CURL_SOCKET_TIMEOUT in timeout_ms (-1: no more). */
static int on_timer(CURLM *m, long timeout_ms, void *userdata) {
        (void)m;
        struct fiber_sched *s = userdata;
        s->curl_due_us = timeout_ms < 0 ? 0 : monotime_us() + (int64_t)timeout_ms * 1000;
        return 0;
}

static int sched_init(struct fiber_sched *s) {
        struct epoll_event ev = { .events = EPOLLIN };
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
                return -EIO;
        s->multi = curl_multi_init();
        s->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
        s->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (!s->multi || s->epoll_fd < 0 || s->wake_fd < 0)
                return -EIO;
        ev.data.fd = s->wake_fd;
        if (epoll_ctl(s->epoll_fd, EPOLL_CTL_ADD, s->wake_fd, &ev) < 0)
                return -errno;
        curl_multi_setopt(s->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
        curl_multi_setopt(s->multi, CURLMOPT_SOCKETDATA, s);
        curl_multi_setopt(s->multi, CURLMOPT_TIMERFUNCTION, on_timer);
        curl_multi_setopt(s->multi, CURLMOPT_TIMERDATA, s);
        curl_multi_setopt(s->multi, CURLMOPT_MAXCONNECTS, FIBER_MAX_CONNECTIONS);
        return 0;
}

int fiber_sched_new(struct fiber_sched **ret_sched) {
        struct fiber_sched *s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        s->epoll_fd = s->wake_fd = -1;
        pthread_mutex_init(&s->mu, NULL);
        int r = sched_init(s);
        if (r < 0) {
                fiber_sched_free(s);
                return r;
        }
        *ret_sched = s;
        return 0;
}

void fiber_sched_free(struct fiber_sched *s) {
        if (!s)
                return;
        for (size_t i = 0; i < s->n_stacks; i++)
                munmap(s->stacks[i], FIBER_STACK_SIZE + page_size());
        free(s->stacks);
        free(s->parked);
        free(s->alive);
        free(s->sleeping);
        free(s->ready);
        free(s->running);
        if (s->multi)
                curl_multi_cleanup(s->multi);
        if (s->epoll_fd >= 0)
                close(s->epoll_fd);
        if (s->wake_fd >= 0)
                close(s->wake_fd);
        pthread_mutex_destroy(&s->mu);
        free(s);
        curl_global_cleanup();
}

/* ---- stacks ---- */

static char *stack_take(struct fiber_sched *s) {
        if (s->n_stacks > 0)
                return s->stacks[--s->n_stacks];
        size_t guard = page_size();
        char *map = mmap(NULL, FIBER_STACK_SIZE + guard, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
        if (map == MAP_FAILED)
                return NULL;
        if (mprotect(map, guard, PROT_NONE) < 0) { /* an overflow faults instead of writing over memory */
                munmap(map, FIBER_STACK_SIZE + guard);
                return NULL;
        }
        return map;
}

static void stack_give(struct fiber_sched *s, char *map) {
        if (ARRAY_GROW(&s->stacks, &s->cap_stacks, s->n_stacks, 16) < 0) {
                munmap(map, FIBER_STACK_SIZE + page_size());
                return;
        }
        s->stacks[s->n_stacks++] = map;
}

/* ---- switching ---- */

static void ready_locked(struct fiber_sched *s, struct fiber *f) {
        f->state = F_READY;
        f->ready_at_us = monotime_us();
        if (ARRAY_GROW(&s->ready, &s->cap_ready, s->n_ready, 16) == 0)
                s->ready[s->n_ready++] = f;
        else
                abort(); /* a task that is never run again would hang its caller forever */
}

static void trampoline(void) {
        struct fiber_sched *s = tl_sched;
        struct fiber *f = s->current;
        ASAN_FINISH(NULL, &s->main_bottom, &s->main_size);
        f->fn(f->data);
        f->state = F_DONE;
        ASAN_START(NULL, s->main_bottom, s->main_size); /* this stack is done with: back to uc_link */
}

/* From the task: back to the scheduler until it runs the task again. */
static void yield(struct fiber *f) {
        struct fiber_sched *s = f->s;
        ASAN_START(&f->asan_fake, s->main_bottom, s->main_size);
        swapcontext(&f->ctx, &s->main);
        ASAN_FINISH(f->asan_fake, NULL, NULL);
}

static void reap(struct fiber_sched *s, struct fiber *f) {
        for (size_t i = 0; i < s->n_alive; i++)
                if (s->alive[i] == f) {
                        s->alive[i] = s->alive[--s->n_alive];
                        break;
                }
        stack_give(s, f->map);
        free(f);
}

static void resume(struct fiber_sched *s, struct fiber *f) {
        void *fake = NULL;
        f->ready_us += monotime_us() - f->ready_at_us;
        f->state = F_RUNNING;
        s->current = f;
        ASAN_START(&fake, f->map + page_size(), FIBER_STACK_SIZE);
        swapcontext(&s->main, &f->ctx);
        ASAN_FINISH(fake, NULL, NULL);
        s->current = NULL;
        if (f->state == F_DONE)
                reap(s, f);
}

int fiber_spawn(struct fiber_sched *s, fiber_fn fn, void *data) {
        struct fiber *f = calloc(1, sizeof *f);
        bool room = f && ARRAY_GROW(&s->alive, &s->cap_alive, s->n_alive, 16) == 0 &&
                    ARRAY_GROW(&s->sleeping, &s->cap_sleeping, s->n_alive, 16) == 0;
        char *map = room ? stack_take(s) : NULL;
        if (!map) {
                free(f);
                return -ENOMEM;
        }
        *f = (struct fiber){ .s = s, .map = map, .fn = fn, .data = data };
        getcontext(&f->ctx);
        f->ctx.uc_stack.ss_sp = f->map + page_size();
        f->ctx.uc_stack.ss_size = FIBER_STACK_SIZE;
        f->ctx.uc_link = &s->main;
        makecontext(&f->ctx, trampoline, 0);
        s->alive[s->n_alive++] = f;
        pthread_mutex_lock(&s->mu);
        ready_locked(s, f);
        pthread_mutex_unlock(&s->mu);
        return 0;
}

/* ---- the scheduler ---- */

/* Run the ready tasks in the order they became ready, and the ones they make ready. */
static void run_ready(struct fiber_sched *s) {
        pthread_mutex_lock(&s->mu);
        while (s->n_ready > 0) {
                struct fiber **batch = s->ready;
                size_t n = s->n_ready, cap = s->cap_ready;
                s->ready = s->running; /* the batch's array is swapped out while it runs */
                s->cap_ready = s->cap_running;
                s->n_ready = 0;
                s->running = batch;
                s->cap_running = cap;
                pthread_mutex_unlock(&s->mu);
                for (size_t i = 0; i < n; i++)
                        resume(s, batch[i]);
                pthread_mutex_lock(&s->mu);
        }
        pthread_mutex_unlock(&s->mu);
}

/* Ready the sleepers that are due; the time until the next one (or limit). */
static long wake_sleepers(struct fiber_sched *s, long limit_ms) {
        int64_t now = monotime_us();
        pthread_mutex_lock(&s->mu);
        for (size_t i = 0; i < s->n_sleeping;) {
                struct fiber *f = s->sleeping[i];
                if (f->due_us <= now) {
                        s->sleeping[i] = s->sleeping[--s->n_sleeping];
                        ready_locked(s, f);
                        continue;
                }
                if ((f->due_us - now + 999) / 1000 < limit_ms)
                        limit_ms = (long)((f->due_us - now + 999) / 1000);
                i++;
        }
        if (s->n_ready > 0)
                limit_ms = 0;
        pthread_mutex_unlock(&s->mu);
        return limit_ms;
}

static void collect_transfers(struct fiber_sched *s) {
        int64_t now = monotime_us();
        CURLMsg *m;
        int left;
        while ((m = curl_multi_info_read(s->multi, &left))) {
                char *priv = NULL;
                CURL *h = m->easy_handle;
                CURLcode result = m->data.result;
                if (m->msg != CURLMSG_DONE)
                        continue;
                curl_easy_getinfo(h, CURLINFO_PRIVATE, &priv);
                curl_multi_remove_handle(s->multi, h);
                struct fiber *f = (struct fiber *)priv;
                if (!f)
                        continue;
                pthread_mutex_lock(&s->mu);
                f->result = result;
                f->done_us = now;
                ready_locked(s, f);
                pthread_mutex_unlock(&s->mu);
        }
}

/* The transfers whose cancel flag is set end now, as if their progress callback had aborted them. */
static void cancel_transfers(struct fiber_sched *s) {
        int64_t now = monotime_us();
        pthread_mutex_lock(&s->mu);
        for (size_t i = 0; i < s->n_alive; i++) {
                struct fiber *f = s->alive[i];
                if (f->state != F_TRANSFER || !f->cancel || !atomic_load(f->cancel))
                        continue;
                curl_multi_remove_handle(s->multi, f->transfer);
                f->result = CURLE_ABORTED_BY_CALLBACK;
                f->done_us = now;
                ready_locked(s, f);
        }
        pthread_mutex_unlock(&s->mu);
}

static long until_curl_due(const struct fiber_sched *s, long limit_ms) {
        if (!s->curl_due_us)
                return limit_ms;
        int64_t ms = (s->curl_due_us - monotime_us() + 999) / 1000;
        if (ms < 0)
                return 0;
        return ms < limit_ms ? (long)ms : limit_ms;
}

static void drain_wake(struct fiber_sched *s) {
        uint64_t n;
        while (read(s->wake_fd, &n, sizeof n) > 0)
                ;
}

/* Wait for sockets at most wait_ms, and let libcurl act on the ready ones and on its due timeout. */
static void drive_transfers(struct fiber_sched *s, long wait_ms) {
        struct epoll_event ev[FIBER_EVENTS];
        int running;
        int n = epoll_wait(s->epoll_fd, ev, FIBER_EVENTS, wait_ms > INT32_MAX ? INT32_MAX : (int)wait_ms);
        for (int i = 0; i < n; i++) {
                int what = ((ev[i].events & EPOLLIN) ? CURL_CSELECT_IN : 0) |
                           ((ev[i].events & EPOLLOUT) ? CURL_CSELECT_OUT : 0) |
                           ((ev[i].events & (EPOLLERR | EPOLLHUP)) ? CURL_CSELECT_ERR : 0);
                if (ev[i].data.fd == s->wake_fd) {
                        drain_wake(s);
                } else if (is_parked(s, ev[i].data.fd)) { /* an idle connection closed: libcurl finds out on reuse */
                        epoll_ctl(s->epoll_fd, EPOLL_CTL_DEL, ev[i].data.fd, NULL);
                        s->parked[ev[i].data.fd] = 0;
                } else
                        curl_multi_socket_action(s->multi, ev[i].data.fd, what, &running);
        }
        if (s->curl_due_us && s->curl_due_us <= monotime_us()) {
                s->curl_due_us = 0;
                curl_multi_socket_action(s->multi, CURL_SOCKET_TIMEOUT, 0, &running);
        }
}

size_t fiber_sched_step(struct fiber_sched *s, long timeout_ms) {
        tl_sched = s;
        run_ready(s);
        long wait = wake_sleepers(s, timeout_ms > 0 ? timeout_ms : 0);
        drive_transfers(s, until_curl_due(s, wait));
        collect_transfers(s);
        cancel_transfers(s);
        wake_sleepers(s, 0);
        run_ready(s);
        tl_sched = NULL;
        return s->n_alive;
}

void fiber_sched_wakeup(struct fiber_sched *s) {
        uint64_t one = 1;
        ssize_t n = write(s->wake_fd, &one, sizeof one);
        (void)n; /* full (EAGAIN) means a wake is pending anyway */
}

/* ---- inside tasks ---- */

struct fiber *fiber_self(void) {
        return tl_sched ? tl_sched->current : NULL;
}

void *fiber_data(const struct fiber *f) {
        return f->data;
}

void fiber_sleep_ms(long ms) {
        struct fiber *f = fiber_self();
        if (!f) {
                struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
                nanosleep(&ts, NULL);
                return;
        }
        pthread_mutex_lock(&f->s->mu);
        f->state = F_SLEEP;
        f->due_us = monotime_us() + (int64_t)ms * 1000;
        f->s->sleeping[f->s->n_sleeping++] = f; /* room made at spawn */
        pthread_mutex_unlock(&f->s->mu);
        yield(f);
}

CURLcode fiber_perform_cancelable(CURL *h, const atomic_bool *cancel, int64_t *ret_done_us) {
        struct fiber *f = fiber_self();
        if (!f) { /* curl_easy_perform polls at least once a second: the progress callback sees the cancel */
                CURLcode r = curl_easy_perform(h);
                *ret_done_us = monotime_us();
                return r;
        }
        curl_easy_setopt(h, CURLOPT_PRIVATE, (char *)f);
        if (curl_multi_add_handle(f->s->multi, h) != CURLM_OK) {
                *ret_done_us = monotime_us();
                return CURLE_FAILED_INIT;
        }
        pthread_mutex_lock(&f->s->mu);
        f->transfer = h;
        f->cancel = cancel;
        f->state = F_TRANSFER;
        pthread_mutex_unlock(&f->s->mu);
        yield(f);
        f->transfer = NULL;
        f->cancel = NULL;
        *ret_done_us = f->done_us;
        return f->result;
}

void fiber_park(void) {
        struct fiber *f = fiber_self();
        pthread_mutex_lock(&f->s->mu);
        if (f->wake_pending) {
                f->wake_pending = false;
                pthread_mutex_unlock(&f->s->mu);
                return;
        }
        f->state = F_PARKED;
        pthread_mutex_unlock(&f->s->mu);
        yield(f); /* a wake in between readies it: the scheduler runs it only after this yield */
}

void fiber_wake(struct fiber *f) {
        struct fiber_sched *s = f->s;
        pthread_mutex_lock(&s->mu);
        if (f->state == F_PARKED)
                ready_locked(s, f);
        else
                f->wake_pending = true;
        pthread_mutex_unlock(&s->mu);
        if (tl_sched != s)
                fiber_sched_wakeup(s);
}

int64_t *fiber_wait_us(struct fiber *f) {
        return &f->wait_us;
}

int64_t fiber_ready_us(const struct fiber *f) {
        return f->ready_us;
}
