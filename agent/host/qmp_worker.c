/* qmp_worker: a thread that asks QEMU for its vCPU threads over QMP, so a slow QEMU never stalls the event loop. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "qmp_worker.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "pinning_qmp.h"

/* A question, and once asked its answer; kept in one of two FIFO lists. */
struct job {
        struct job *next;
        char *socket_path;
        struct qmp_answer answer;
};

struct queue {
        struct job *head, **tail;
};

/* The mutex guards the two queues and `stop`; event_fd is readable exactly while `answers` is not empty. */
struct qmp_worker {
        pthread_t thread;
        pthread_mutex_t lock;
        pthread_cond_t wake;
        struct queue questions, answers;
        bool stop;
        int timeout_ms;
        int event_fd;
};

static void queue_push(struct queue *q, struct job *j) {
        j->next = NULL;
        *q->tail = j;
        q->tail = &j->next;
}

static struct job *queue_pop(struct queue *q) {
        struct job *j = q->head;
        if (j) {
                q->head = j->next;
                if (!q->head)
                        q->tail = &q->head;
        }
        return j;
}

static void job_free(struct job *j) {
        free(j->socket_path);
        free(j->answer.tids);
        free(j);
}

static void queue_clear(struct queue *q) {
        for (struct job *j; (j = queue_pop(q));)
                job_free(j);
}

/* The next question, or NULL when asked to stop. */
static struct job *next_question(struct qmp_worker *w) {
        pthread_mutex_lock(&w->lock);
        while (!w->stop && !w->questions.head)
                pthread_cond_wait(&w->wake, &w->lock);
        struct job *j = w->stop ? NULL : queue_pop(&w->questions);
        pthread_mutex_unlock(&w->lock);
        return j;
}

static void post_answer(struct qmp_worker *w, struct job *j) {
        uint64_t one = 1;
        pthread_mutex_lock(&w->lock);
        queue_push(&w->answers, j);
        ssize_t n = write(w->event_fd, &one, sizeof one);
        (void)n; /* full (EAGAIN) means the fd is readable anyway */
        pthread_mutex_unlock(&w->lock);
}

static void *run(void *userdata) {
        struct qmp_worker *w = userdata;
        for (struct job *j; (j = next_question(w));) {
                struct qmp_answer *a = &j->answer;
                a->error = pinning_qmp_vcpu_threads(j->socket_path, w->timeout_ms, &a->tids, &a->n);
                post_answer(w, j);
        }
        return NULL;
}

/* The thread starts with every signal blocked, so that SIGTERM and friends reach the loop's signalfd. */
static int start_thread(struct qmp_worker *w) {
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        int r = -pthread_create(&w->thread, NULL, run, w);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        return r;
}

int qmp_worker_start(int timeout_ms, struct qmp_worker **ret_worker) {
        struct qmp_worker *w = calloc(1, sizeof(*w));
        if (!w)
                return -ENOMEM;
        *w = (struct qmp_worker){.timeout_ms = timeout_ms, .questions.tail = &w->questions.head,
                                 .answers.tail = &w->answers.head};
        pthread_mutex_init(&w->lock, NULL);
        pthread_cond_init(&w->wake, NULL);
        w->event_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        int r = w->event_fd < 0 ? -errno : start_thread(w);
        if (r < 0) {
                if (w->event_fd >= 0)
                        close(w->event_fd);
                pthread_cond_destroy(&w->wake);
                pthread_mutex_destroy(&w->lock);
                free(w);
                return r;
        }
        *ret_worker = w;
        return 0;
}

void qmp_worker_free(struct qmp_worker *w) {
        if (!w)
                return;
        pthread_mutex_lock(&w->lock);
        w->stop = true;
        pthread_cond_signal(&w->wake);
        pthread_mutex_unlock(&w->lock);
        pthread_join(w->thread, NULL);
        queue_clear(&w->questions);
        queue_clear(&w->answers);
        close(w->event_fd);
        pthread_cond_destroy(&w->wake);
        pthread_mutex_destroy(&w->lock);
        free(w);
}

int qmp_worker_fd(const struct qmp_worker *w) {
        return w->event_fd;
}

int qmp_worker_ask(struct qmp_worker *w, int vmid, int pid, const char *socket_path) {
        struct job *j = calloc(1, sizeof(*j));
        char *path = strdup(socket_path);
        if (!j || !path) {
                free(j);
                free(path);
                return -ENOMEM;
        }
        j->socket_path = path;
        j->answer = (struct qmp_answer){.vmid = vmid, .pid = pid};
        pthread_mutex_lock(&w->lock);
        queue_push(&w->questions, j);
        pthread_cond_signal(&w->wake);
        pthread_mutex_unlock(&w->lock);
        return 0;
}

int qmp_worker_take(struct qmp_worker *w, struct qmp_answer *ret_answer) {
        uint64_t count;
        pthread_mutex_lock(&w->lock);
        struct job *j = queue_pop(&w->answers);
        if (!w->answers.head) {
                ssize_t n = read(w->event_fd, &count, sizeof count);
                (void)n; /* EAGAIN: already drained */
        }
        pthread_mutex_unlock(&w->lock);
        if (!j)
                return 0;
        *ret_answer = j->answer;
        j->answer.tids = NULL;
        job_free(j);
        return 1;
}
