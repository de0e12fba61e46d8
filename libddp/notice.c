/*
 * notice.c - the preemption notice of a worker (ddp/notice.h).
 *
 * Invariants: the signal handler writes one volatile sig_atomic_t and nothing else; the
 * control descriptor is read only by ddp_notice_pending(), never blocking, so a step costs
 * one read() that finds nothing (EAGAIN) and, at world size > 1, a one-double all-reduce.
 */
#include "ddp/notice.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/args.h"
#include "common/log.h"
#include "common/signame.h"
#include "ddp/ddp.h"

static volatile sig_atomic_t notice_flag;
static int notice_signo;
static int notice_fd = -1;
static char notice_line[64];
static size_t notice_len;

static void notice_handler(int signo)
{
    (void)signo;
    notice_flag = 1;
}

int ddp_notice_install(struct ddp_err *err)
{
    const char *name = getenv("DDP_PREEMPT_SIGNAL");
    if (!name || !name[0])
        name = SIGNAME_DEFAULT;
    int signo = signame_parse(name);
    if (signo < 0)
        return err_set(err, DDP_EINVAL, "DDP_PREEMPT_SIGNAL '%.32s': expected one of %s", name,
                       signame_allowed());
    long fd = -1;
    const char *fds = getenv("DDP_CONTROL_FD");
    if (fds && fds[0]) {
        if (args_parse_long("DDP_CONTROL_FD", fds, 0, 65535, &fd, err) != 0)
            return DDP_EINVAL;
        int fl = fcntl((int)fd, F_GETFL);
        if (fl < 0 || fcntl((int)fd, F_SETFL, fl | O_NONBLOCK) != 0) {
            log_warn("DDP_CONTROL_FD %ld: %s; only the signal gives notice", fd, strerror(errno));
            fd = -1;
        } else {
            (void)fcntl((int)fd, F_SETFD, FD_CLOEXEC);
        }
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = notice_handler;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(signo, &sa, NULL) != 0)
        return err_set(err, DDP_EINTERNAL, "sigaction %s: %s", name, strerror(errno));
    notice_signo = signo;
    notice_fd = (int)fd;
    return 0;
}

int ddp_notice_signal(void)
{
    return notice_signo;
}

void ddp_notice_raise(void)
{
    notice_flag = 1;
}

/* Reads what the control descriptor holds; a complete "preempt" line sets the flag. At EOF
 * (the agent is gone) the descriptor is closed: PDEATHSIG ends the worker anyway. */
static void notice_read(void)
{
    for (;;) {
        char buf[128];
        ssize_t k = read(notice_fd, buf, sizeof(buf));
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            if (k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
                close(notice_fd);
                notice_fd = -1;
            }
            return;
        }
        for (ssize_t i = 0; i < k; i++) {
            if (buf[i] != '\n') {
                if (notice_len < sizeof(notice_line) - 1)
                    notice_line[notice_len++] = buf[i];
                continue;
            }
            notice_line[notice_len] = '\0';
            if (strncmp(notice_line, "preempt", 7) == 0 &&
                (notice_line[7] == '\0' || notice_line[7] == ' ')) {
                notice_flag = 1;
                log_info("preemption notice on DDP_CONTROL_FD: %s", notice_line);
            }
            notice_len = 0;
        }
    }
}

int ddp_notice_pending(void)
{
    if (!notice_flag && notice_fd >= 0)
        notice_read();
    return notice_flag != 0;
}

int ddp_notice_agree(struct ddp_group *g, int *any, struct ddp_err *err)
{
    double v = ddp_notice_pending() ? 1.0 : 0.0;
    if (g->world_size > 1) {
        int rc = ddp_allreduce_f64(g, &v, 1, err);
        if (rc)
            return rc;
    }
    *any = v > 0.0;
    return 0;
}
