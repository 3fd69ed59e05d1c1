/* Tests for shared/fiber: tasks yield while they sleep, park or transfer, wake in the right order, are woken from
 * other threads, a transfer to a silent peer ends soon after its cancel flag is set (TLS handshake included), an
 * idle connection the peer closes neither spins the scheduler nor breaks the next transfer, and the same calls
 * block as before outside tasks. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fiber.h"
#include "monotime.h"

#define MAX_LOG 16

struct run_log {
        int order[MAX_LOG];
        size_t n;
        int started;                /* tasks that began */
        int started_at_wake[MAX_LOG]; /* started, as each task woke */
};

struct sleeper {
        struct run_log *log;
        int id;
        long ms;
};

static void sleeper_task(void *data) {
        struct sleeper *s = data;
        s->log->started++;
        fiber_sleep_ms(s->ms);
        s->log->started_at_wake[s->log->n] = s->log->started;
        s->log->order[s->log->n++] = s->id;
}

/* Step until no task is alive, failing after a few seconds. */
static void run_all(struct fiber_sched *sched) {
        int64_t end = monotime_ms() + 5000;
        while (fiber_sched_step(sched, 50) > 0)
                if (monotime_ms() > end)
                        fail_msg("tasks still alive after 5 s");
}

static void test_sleepers_wake_in_time_order(void **state) {
        (void)state;
        struct fiber_sched *sched;
        struct run_log log = { 0 };
        struct sleeper s[] = { { &log, 1, 60 }, { &log, 2, 10 }, { &log, 3, 35 } };
        assert_int_equal(fiber_sched_new(&sched), 0);
        int64_t t0 = monotime_ms();
        for (size_t i = 0; i < 3; i++)
                assert_int_equal(fiber_spawn(sched, sleeper_task, &s[i]), 0);
        run_all(sched);
        assert_int_equal(log.n, 3);
        assert_int_equal(log.order[0], 2);
        assert_int_equal(log.order[1], 3);
        assert_int_equal(log.order[2], 1);
        /* They slept at once: all three had begun before the first woke. */
        assert_int_equal(log.started_at_wake[0], 3);
        assert_true(monotime_ms() - t0 >= 60);
        fiber_sched_free(sched);
}

struct parker {
        struct fiber *self;
        int woken;
        int wake_first; /* wake itself before parking: the park must not wait */
};

static void parker_task(void *data) {
        struct parker *p = data;
        p->self = fiber_self();
        assert_non_null(p->self);
        assert_ptr_equal(fiber_data(p->self), p);
        if (p->wake_first)
                fiber_wake(p->self);
        fiber_park();
        p->woken = 1;
}

static void *wake_later(void *arg) {
        struct parker *p = arg;
        usleep(30 * 1000);
        fiber_wake(p->self);
        return NULL;
}

static void test_park_and_wake_from_another_thread(void **state) {
        (void)state;
        struct fiber_sched *sched;
        struct parker p = { 0 }, early = { .wake_first = 1 };
        pthread_t th;
        assert_int_equal(fiber_sched_new(&sched), 0);
        assert_int_equal(fiber_spawn(sched, parker_task, &p), 0);
        assert_int_equal(fiber_spawn(sched, parker_task, &early), 0);
        assert_int_equal(fiber_sched_step(sched, 0), 1); /* early ran through; p is parked */
        assert_int_equal(early.woken, 1);
        assert_int_equal(p.woken, 0);
        assert_int_equal(fiber_sched_step(sched, 0), 1); /* nobody woke it: it stays parked */
        assert_int_equal(pthread_create(&th, NULL, wake_later, &p), 0);
        run_all(sched);
        assert_int_equal(p.woken, 1);
        pthread_join(th, NULL);
        fiber_sched_free(sched);
}

struct fetch {
        const char *url;
        struct run_log *log;
        int id;
        CURLcode code;
        char body[64];
        size_t len;
};

static size_t on_data(char *data, size_t size, size_t n, void *userdata) {
        struct fetch *f = userdata;
        size_t len = size * n;
        if (f->len + len >= sizeof f->body)
                return 0;
        memcpy(f->body + f->len, data, len);
        f->len += len;
        return len;
}

static void fetch_task(void *data) {
        struct fetch *f = data;
        CURL *h = curl_easy_init();
        int64_t done_us = 0;
        curl_easy_setopt(h, CURLOPT_URL, f->url);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, f);
        f->code = fiber_perform_cancelable(h, NULL, &done_us);
        assert_true(done_us > 0);
        f->log->order[f->log->n++] = f->id;
        curl_easy_cleanup(h);
}

static void test_transfers_yield(void **state) {
        (void)state;
        char path[] = "/tmp/test_fiber_XXXXXX", url[64];
        int fd = mkstemp(path);
        assert_true(fd >= 0);
        assert_int_equal(write(fd, "hello fiber\n", 12), 12);
        close(fd);
        snprintf(url, sizeof url, "file://%s", path);
        struct fiber_sched *sched;
        struct run_log log = { 0 };
        struct fetch a = { url, &log, 1, CURLE_FAILED_INIT, "", 0 }, b = { url, &log, 2, CURLE_FAILED_INIT, "", 0 };
        struct sleeper quick = { &log, 3, 0 };
        assert_int_equal(fiber_sched_new(&sched), 0);
        assert_int_equal(fiber_spawn(sched, fetch_task, &a), 0);
        assert_int_equal(fiber_spawn(sched, fetch_task, &b), 0);
        assert_int_equal(fiber_spawn(sched, sleeper_task, &quick), 0);
        run_all(sched);
        assert_int_equal(a.code, CURLE_OK);
        assert_int_equal(b.code, CURLE_OK);
        assert_string_equal(a.body, "hello fiber\n");
        assert_string_equal(b.body, "hello fiber\n");
        /* Both transfers yielded: the third task, spawned last, did not wait behind them. */
        assert_int_equal(log.n, 3);
        assert_int_equal(log.order[0], 3);
        /* Outside a task the same call blocks and works. */
        struct fetch c = { url, &log, 4, CURLE_FAILED_INIT, "", 0 };
        assert_null(fiber_self());
        fetch_task(&c);
        assert_int_equal(c.code, CURLE_OK);
        assert_string_equal(c.body, "hello fiber\n");
        unlink(path);
        fiber_sched_free(sched);
}

struct silent {
        int port;
        bool tls;       /* https: the transfer waits in the TLS handshake */
        bool scheduler; /* no progress callback: the cancel is fiber_perform_cancelable's */
        atomic_bool cancel;
        CURLcode code;
};

static int cancel_on_flag(void *userdata, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d) {
        (void)a, (void)b, (void)c, (void)d;
        struct silent *s = userdata;
        return atomic_load(&s->cancel) ? 1 : 0;
}

static void silent_fetch_task(void *data) {
        struct silent *s = data;
        char url[64];
        int64_t done_us;
        snprintf(url, sizeof url, "%s://127.0.0.1:%d/", s->tls ? "https" : "http", s->port);
        CURL *h = curl_easy_init();
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 30000L);
        curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 30000L);
        if (s->scheduler) {
                s->code = fiber_perform_cancelable(h, &s->cancel, &done_us);
                curl_easy_cleanup(h);
                return;
        }
        curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, cancel_on_flag);
        curl_easy_setopt(h, CURLOPT_XFERINFODATA, s);
        s->code = fiber_perform_cancelable(h, NULL, &done_us);
        curl_easy_cleanup(h);
}

static void set_cancel_task(void *data) {
        struct silent *s = data;
        fiber_sleep_ms(100);
        atomic_store(&s->cancel, true);
}

/* A peer that accepts the connection (the kernel does, from the backlog) and never answers. */
static int silent_listener(int *ret_port) {
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t len = sizeof a;
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        assert_true(fd >= 0);
        assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
        assert_int_equal(listen(fd, 4), 0);
        assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
        *ret_port = ntohs(a.sin_port);
        return fd;
}

static void silent_peer_cancelled(struct silent *in) {
        struct fiber_sched *sched;
        struct silent s = *in;
        int fd = silent_listener(&s.port);
        assert_int_equal(fiber_sched_new(&sched), 0);
        assert_int_equal(fiber_spawn(sched, silent_fetch_task, &s), 0);
        assert_int_equal(fiber_spawn(sched, set_cancel_task, &s), 0);
        int64_t t0 = monotime_ms();
        run_all(sched); /* fails after 5 s: the transfer's own timeout (30 s) must not be what ends it */
        assert_int_equal(s.code, CURLE_ABORTED_BY_CALLBACK);
        assert_true(monotime_ms() - t0 >= 100);
        close(fd);
        fiber_sched_free(sched);
}

static void test_silent_peer_cancelled_by_progress(void **state) {
        (void)state;
        silent_peer_cancelled(&(struct silent){ .code = CURLE_OK });
}

/* Waiting for a TLS handshake that never comes (kube-apiserver restarting, or stopped, behind a port that still
 * accepts), a transfer in the multi is looked at only when its connect timeout is due, and libcurl does not call
 * its progress callback meanwhile (with the callback alone this ran into run_all's 5 s): the scheduler ends it.
 * And a plain request waiting for its answer the same way. */
static void test_silent_tls_peer_cancelled_by_the_scheduler(void **state) {
        (void)state;
        silent_peer_cancelled(&(struct silent){ .tls = true, .scheduler = true, .code = CURLE_OK });
        silent_peer_cancelled(&(struct silent){ .scheduler = true, .code = CURLE_OK });
}

/* A keep-alive peer that answers each request on a connection with a fixed 200, and closes the first connection
 * soon after its answer, as a server does with an idle one. */
struct closing_peer {
        int listen_fd;
        int connections;
};

static void answer_requests(int fd, bool close_soon) {
        static const char answer[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
        char buf[4096];
        ssize_t n;
        while ((n = read(fd, buf, sizeof buf)) > 0) {
                assert_int_equal(write(fd, answer, sizeof answer - 1), (ssize_t)(sizeof answer - 1));
                if (close_soon) {
                        usleep(50 * 1000);
                        break;
                }
        }
        close(fd);
}

static void *closing_peer_main(void *arg) {
        struct closing_peer *p = arg;
        for (int i = 0; i < 2; i++) {
                int fd = accept(p->listen_fd, NULL, NULL);
                if (fd < 0)
                        break;
                p->connections++;
                answer_requests(fd, i == 0);
        }
        return NULL;
}

struct twice {
        char url[64];
        CURLcode first, second;
        int steps_while_idle; /* scheduler steps while the task slept with its connection idle */
        bool sleeping;
};

static void fetch_twice_task(void *data) {
        struct twice *t = data;
        int64_t done_us;
        CURL *h = curl_easy_init();
        curl_easy_setopt(h, CURLOPT_URL, t->url);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
        struct fetch sink = { 0 };
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &sink);
        t->first = fiber_perform_cancelable(h, NULL, &done_us);
        t->sleeping = true;
        fiber_sleep_ms(300); /* the peer closes the idle connection meanwhile */
        t->sleeping = false;
        sink.len = 0;
        t->second = fiber_perform_cancelable(h, NULL, &done_us);
        curl_easy_cleanup(h);
}

/* libcurl stops watching a connection that goes idle; the scheduler keeps it in epoll for its next transfer. When
 * the peer closes it meanwhile, that must drop it, not wake the scheduler over and over (epoll is level-triggered),
 * and the next transfer connects again. */
static void test_idle_connection_closed_by_peer(void **state) {
        (void)state;
        struct closing_peer peer = { 0 };
        struct twice t = { .first = CURLE_FAILED_INIT, .second = CURLE_FAILED_INIT };
        struct fiber_sched *sched;
        pthread_t th;
        int port;
        peer.listen_fd = silent_listener(&port);
        snprintf(t.url, sizeof t.url, "http://127.0.0.1:%d/", port);
        assert_int_equal(pthread_create(&th, NULL, closing_peer_main, &peer), 0);
        assert_int_equal(fiber_sched_new(&sched), 0);
        assert_int_equal(fiber_spawn(sched, fetch_twice_task, &t), 0);
        int64_t end = monotime_ms() + 5000;
        while (fiber_sched_step(sched, 50) > 0) {
                t.steps_while_idle += t.sleeping;
                if (monotime_ms() > end)
                        fail_msg("tasks still alive after 5 s");
        }
        assert_int_equal(t.first, CURLE_OK);
        assert_int_equal(t.second, CURLE_OK);
        assert_int_equal(peer.connections, 2);
        /* About 300 ms in steps of up to 50 ms, plus the wake for the closed connection: a handful, not thousands. */
        assert_in_range(t.steps_while_idle, 1, 20);
        fiber_sched_free(sched); /* closes the second connection, which the peer reads to its end */
        pthread_join(th, NULL);
        close(peer.listen_fd);
}

static void test_outside_tasks(void **state) {
        (void)state;
        assert_null(fiber_self());
        int64_t t0 = monotime_ms();
        fiber_sleep_ms(20); /* a plain sleep */
        assert_true(monotime_ms() - t0 >= 20);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_sleepers_wake_in_time_order),
                cmocka_unit_test(test_park_and_wake_from_another_thread),
                cmocka_unit_test(test_transfers_yield),
                cmocka_unit_test(test_silent_peer_cancelled_by_progress),
                cmocka_unit_test(test_silent_tls_peer_cancelled_by_the_scheduler),
                cmocka_unit_test(test_idle_connection_closed_by_peer),
                cmocka_unit_test(test_outside_tasks),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
