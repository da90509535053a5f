/* SPDX-License-Identifier: BSD-3-Clause */
/* redisproc.h -- one launcher for a private redis-server: the tests' nodes,
 * the benchmark's servers and `dlockd --dev` all start theirs with it.
 *
 *   struct redisproc r;
 *   struct redisproc_opts o = {.unix_socket = "/tmp/x/redis.sock", .dir = "/tmp/x",
 *                              .log = "/tmp/x/redis.log"};
 *   if (redisproc_start(&r, &o, 5000) != 0)
 *       fprintf(stderr, "%s\n", r.err);      // why: not on PATH, bad argument, no PING
 *   ...
 *   redisproc_stop(&r, 5000);                  // SIGTERM, SIGKILL after 5 s, reaped
 *
 * The server runs in the foreground as a child of the caller and dies with
 * it (PR_SET_PDEATHSIG, so with the calling thread); it inherits no
 * descriptor but stdin (/dev/null), stdout and stderr (the log file), and
 * starts with default signal dispositions and no signal blocked. Without
 * persistence asked for, it saves no RDB and keeps no AOF. */
#ifndef DLOCK_REDISPROC_H
#define DLOCK_REDISPROC_H

#include <stdbool.h>
#include <sys/types.h>

/* The process launcher under it, for other programs too (the benchmark's
 * agents): starts argv[0] (looked up on PATH) as a child that dies with the
 * calling thread, with stdin on /dev/null, stdout and stderr appended to log
 * (NULL: /dev/null), in dir (NULL: here), with default signal dispositions
 * and no other descriptor. Returns its pid once it has exec'd, or -1 with why
 * in err (and, when it had started, *status its exit code; else -1). */
pid_t proc_spawn(char *const argv[], const char *log, const char *dir, char *err, size_t errlen,
                 int *status);
/* A wait status as one code: the exit status, 128 + the signal, or -1. */
int proc_exit_code(int wstatus);

struct redisproc_opts {
    const char *program;     /* NULL: "redis-server", looked up on PATH */
    const char *unix_socket; /* the server's unix socket, or NULL for none */
    const char *socket_perm; /* --unixsocketperm; NULL: "700" */
    int port;                /* TCP port, 0: none (--port 0) */
    const char *bind;        /* with a port: the address; NULL: "127.0.0.1" */
    /* The server's working directory (its dir: RDB, AOF), NULL: the
     * caller's. A relative socket path is taken from there: give absolute ones. */
    const char *dir;
    const char *log; /* stdout and stderr appended to this file; NULL: /dev/null */
    bool persist;    /* false: --save "" --appendonly no */
    /* More arguments, NULL-terminated (may be NULL), after the ones above,
     * which they override: e.g. {"--appendonly", "yes", NULL}. */
    const char *const *extra;
};

struct redisproc {
    pid_t pid;   /* 0 when not running (or already reaped) */
    bool paused; /* SIGSTOPped by redisproc_pause() */
    /* How the last run ended, once reaped: its exit code, 128+signal, or -1
     * when unknown (still running, or reaped by someone else). */
    int status;
    char sock[108]; /* where PING goes: the unix socket, or */
    char host[64];  /* the TCP address and */
    int port;       /* port */
    char log[256];  /* the log file, for error messages ("" none) */
    char err[512];  /* why the last call failed */
};

/* Forks and execs the server without waiting for it to answer. 0, or -1 with
 * r->err set: a path too long, fork failing, or the program not runnable
 * ("cannot run redis-server: No such file or directory (is it on PATH?)"). */
int redisproc_spawn(struct redisproc *r, const struct redisproc_opts *o); /* r: not running */
/* Waits until the server answers PING with PONG, for at most timeout_ms (a
 * server of another process on the same port does not count).
 * 0, or -1 with r->err set: it exited (its status and the last lines of its
 * log: a bad argument shows there), or did not answer in time. */
int redisproc_wait_ready(struct redisproc *r, int timeout_ms);
/* redisproc_spawn() then redisproc_wait_ready(); on failure the server is
 * stopped (killed and reaped) and r->err says why. */
int redisproc_start(struct redisproc *r, const struct redisproc_opts *o, int timeout_ms);

/* One PING, with a connect and reply timeout of timeout_ms: 0 on PONG from
 * this server (its INFO process_id is r->pid, when r->pid is known). */
int redisproc_ping(const struct redisproc *r, int timeout_ms);
/* Whether it still runs; reaps it (and records its status) when it has
 * exited. A paused server runs. */
bool redisproc_alive(struct redisproc *r);
/* The caller reaped it (an event loop's child watcher, say), with this
 * waitpid() status: the server is no longer tracked. */
void redisproc_reaped(struct redisproc *r, int wstatus);

/* SIGSTOP: it keeps its connections and data, answers nothing. */
int redisproc_pause(struct redisproc *r);
/* SIGCONT after a pause. */
void redisproc_resume(struct redisproc *r);
/* SIGTERM (after SIGCONT when paused), SIGKILL when it has not exited within
 * grace_ms; reaps it. Its status (r->status); -1 when it was not running. */
int redisproc_stop(struct redisproc *r, int grace_ms);
/* SIGKILL and reap (a crash: nothing saved). */
void redisproc_kill(struct redisproc *r);

#endif
