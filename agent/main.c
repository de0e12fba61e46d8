/*
 * main.c - ddp-agent's command line: flags and their defaults (docs/agent.md), the
 * isolation (whose account jobs run as) and the user map, the agent token, the signal set-up
 * every thread inherits, then agent_run().
 *
 * Exit codes: 0 after a clean stop (SIGTERM/SIGINT), 1 when the agent cannot run, 2 on a
 * usage error.
 */
#include <errno.h>
#include <getopt.h>
#include <glob.h>
#include <netdb.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>

#include "agent/agent.h"
#include "agent/gpus.h"
#include "common/args.h"
#include "common/fsutil.h"
#include "common/label.h"
#include "common/log.h"
#include "common/srvlist.h"
#include "common/tokenfile.h"
#include "common/xalloc.h"
#include "ddp_version.h"

#define AGENT_DEFAULT_SERVER "http://127.0.0.1:8470"

static const char usage_line[] =
    "usage: ddp-agent [--server URL] [--token-file F] [--name NAME] [--address ADDR]\n"
    "                 [--slots N] [--port-range A-B] [--work-dir DIR] [--grace SECONDS]\n"
    "                 [--orphan-timeout SECONDS] [--cgroup auto|v2|freezer|pids|off]\n"
    "                 [--isolation auto|per-user|single-user] [--user-map FILE]\n"
    "                 [--label K=V]... [--log-level debug|info|warn|error] [--version]\n";

static void usage_help(void)
{
    fputs(usage_line, stdout);
    fputs("\n"
          "Runs the workers that ddpd assigns to this node.\n"
          "  --server URL[,URL...]\n"
          "                     ddpd, or its replicas, comma-separated (default $DDP_SERVER,\n"
          "                     else " AGENT_DEFAULT_SERVER "; an empty URL is refused)\n"
          "  --token-file F     agent token file (default $DDP_AGENT_TOKEN, else\n"
          "                     $DDP_HOME/agent.token; DDP_HOME defaults to ./.ddp)\n"
          "  --name NAME        node name (default the host name)\n"
          "  --address ADDR     address other nodes reach this one at (default the local\n"
          "                     address of the route to the server)\n"
          "  --slots N          worker slots (default the GPUs found, else the CPU count)\n"
          "  --port-range A-B   ports ddpd may give this node's jobs (default 29500-29999)\n"
          "  --work-dir DIR     logs, heartbeat files, checkpoints (default\n"
          "                     $DDP_HOME/agent-NAME)\n"
          "  --grace SECONDS    SIGTERM-to-SIGKILL grace when a job gives none (default 30)\n"
          "  --orphan-timeout SECONDS\n"
          "                     no answer from ddpd for this long: stop the running workers,\n"
          "                     whose jobs have likely moved to other nodes (default 30;\n"
          "                     0 = keep them running however long ddpd is away)\n"
          "  --cgroup KIND      a cgroup per job, killed with the job: auto (default: v2,\n"
          "                     else v1 freezer, else v1 pids, else none), v2, freezer,\n"
          "                     pids, or off\n"
          "  --isolation I      whose account a job runs as: per-user (its owner's local\n"
          "                     account; needs root), single-user (the agent's own user),\n"
          "                     auto (default: per-user as root, else single-user)\n"
          "  --user-map FILE    per-user: lines 'DDPUSER ACCOUNT' ('* =': the account of\n"
          "                     the same name, the default without a file)\n"
          "  --label K=V        a label of this node for jobs' node_selector (repeatable; K\n"
          "                     1..63 of [A-Za-z0-9._/-], V 0..63 of [A-Za-z0-9._-]); cpus,\n"
          "                     memory_gb and gpus are detected (a --label overrides them)\n"
          "  --log-level L      debug, info, warn or error (default info)\n"
          "  --version          print the version and the git commit, and exit\n",
          stdout);
}

/* Adds what the agent knows of its node (cpus, memory_gb, gpus) to labels, where a --label
 * did not set them. */
static void detect_labels(json_t *labels, int gpus)
{
    char v[32];
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (cpus > 0 && !json_object_get(labels, "cpus")) {
        snprintf(v, sizeof(v), "%ld", cpus);
        json_object_set_new(labels, "cpus", json_string(v));
    }
    if (pages > 0 && page > 0 && !json_object_get(labels, "memory_gb")) {
        snprintf(v, sizeof(v), "%lld", (long long)pages * page / (1024LL * 1024 * 1024));
        json_object_set_new(labels, "memory_gb", json_string(v));
    }
    if (!json_object_get(labels, "gpus")) {
        snprintf(v, sizeof(v), "%d", gpus);
        json_object_set_new(labels, "gpus", json_string(v));
    }
}

static int usage_error(const char *fmt, const char *arg)
{
    fputs("ddp-agent: ", stderr);
    fprintf(stderr, fmt, arg);
    fputc('\n', stderr);
    fputs(usage_line, stderr);
    return 2;
}

/* GPUs of this node: the /dev/nvidiaN device files. */
static int count_gpus(void)
{
    glob_t g;
    memset(&g, 0, sizeof(g));
    int n = 0;
    if (glob("/dev/nvidia[0-9]*", 0, NULL, &g) == 0)
        n = (int)g.gl_pathc;
    globfree(&g);
    return n;
}

/* The local address of the route to the server's host, or 127.0.0.1. */
static char *route_address(const char *url)
{
    const char *p = strstr(url, "://");
    p = p ? p + 3 : url;
    char host[256] = "";
    const char *port = "80";
    if (strncmp(url, "https://", 8) == 0)
        port = "443";
    size_t len;
    if (*p == '[') {
        len = strcspn(p + 1, "]");
        p++;
    } else {
        len = strcspn(p, ":/");
    }
    if (len == 0 || len >= sizeof(host))
        return xstrdup("127.0.0.1");
    memcpy(host, p, len);
    host[len] = '\0';
    char portbuf[16];
    const char *after = p + len + (p[-1] == '[' ? 1 : 0);
    if (*after == ':') {
        size_t pl = strcspn(after + 1, "/");
        if (pl > 0 && pl < sizeof(portbuf)) {
            memcpy(portbuf, after + 1, pl);
            portbuf[pl] = '\0';
            port = portbuf;
        }
    }
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_DGRAM;
    char *out = NULL;
    if (getaddrinfo(host, port, &hints, &res) != 0 || !res)
        goto out;
    int fd = socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        goto out;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    if (connect(fd, res->ai_addr, res->ai_addrlen) == 0 &&
        getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
        char buf[INET6_ADDRSTRLEN] = "";
        const void *src = ss.ss_family == AF_INET
                              ? (const void *)&((struct sockaddr_in *)&ss)->sin_addr
                              : (const void *)&((struct sockaddr_in6 *)&ss)->sin6_addr;
        if (inet_ntop(ss.ss_family, src, buf, sizeof(buf)))
            out = xstrdup(buf);
    }
    close(fd);
out:
    if (res)
        freeaddrinfo(res);
    return out ? out : xstrdup("127.0.0.1");
}

static int name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 63)
        return 0;
    return strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") == n;
}

/* Reads the token file, waiting (and saying so once) while it does not exist yet: ddpd
 * creates it at its first start. Returns NULL when SIGTERM/SIGINT came first or the file
 * cannot be read. */
static char *read_token(const char *path)
{
    int said = 0;
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    for (;;) {
        struct ddp_err err;
        err_clear(&err);
        char *text = NULL;
        int rc = token_file_read(path, "agent", &text, &err);
        if (rc == 0)
            return text;
        if (rc != DDP_ENOTFOUND) {
            log_error("cannot read the agent token: %s", err.msg);
            return NULL;
        }
        if (!said) {
            log_warn("waiting for the agent token file %s (ddpd creates it)", path);
            said = 1;
        }
        struct timespec ts = {.tv_sec = 0, .tv_nsec = 500 * 1000000L};
        if (sigtimedwait(&stop, NULL, &ts) > 0)
            return NULL;
    }
}

/* The token is in memory now. A worker runs as the agent's user and could read the agent's
 * environment (/proc/PPID/environ shows the block the agent started with, whatever unsetenv
 * does) or attach to it: the credentials are wiped from that block and unset, and the agent
 * becomes non-dumpable (its /proc files then belong to root, and it cannot be ptraced or dump
 * core). Workers get none of these variables either (spawn.c). */
static void agent_forget_secrets(void)
{
    static const char *const names[] = {"DDP_AGENT_TOKEN", "DDP_TOKEN"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        char *v = getenv(names[i]);
        if (v)
            memset(v, 0, strlen(v));
        if (unsetenv(names[i]) != 0)
            log_warn("cannot unset %s: %s", names[i], strerror(errno));
    }
    if (prctl(PR_SET_DUMPABLE, 0) != 0)
        log_warn("cannot make the agent non-dumpable: %s", strerror(errno));
}

/* One line at start: whose account jobs run as here. */
static void say_isolation(enum usermap_isolation iso, const char *map_path,
                          const struct usermap *map)
{
    if (iso == USERMAP_PER_USER) {
        if (map_path)
            log_info("isolation: per-user: each job runs as its owner's local account "
                     "(--user-map %s: %zu mappings)",
                     map_path, usermap_count(map));
        else
            log_info("isolation: per-user: each job runs as its owner's local account, the "
                     "one of the same name (no --user-map)");
        return;
    }
    uid_t uid = geteuid();
    if (uid == 0) {
        log_warn("isolation: single-user (--isolation single-user): every job runs as root, "
                 "the agent's own user, whoever owns it");
        return;
    }
    struct passwd pw, *res = NULL;
    char buf[4096];
    const char *who = getpwuid_r(uid, &pw, buf, sizeof(buf), &res) == 0 && res ? pw.pw_name : "?";
    log_info("isolation: single-user: the agent runs as uid %ld (%s), not root, so every job "
             "runs as this user, whoever owns it (jobs can read each other's files and "
             "/proc/PID/environ)",
             (long)uid, who);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"server", required_argument, NULL, 's'},
        {"token-file", required_argument, NULL, 't'},
        {"name", required_argument, NULL, 'n'},
        {"address", required_argument, NULL, 'a'},
        {"slots", required_argument, NULL, 'S'},
        {"port-range", required_argument, NULL, 'p'},
        {"work-dir", required_argument, NULL, 'w'},
        {"grace", required_argument, NULL, 'g'},
        {"orphan-timeout", required_argument, NULL, 'o'},
        {"cgroup", required_argument, NULL, 'c'},
        {"isolation", required_argument, NULL, 'i'},
        {"user-map", required_argument, NULL, 'u'},
        {"label", required_argument, NULL, 'L'},
        {"log-level", required_argument, NULL, 'l'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    struct agent_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    json_t *labels = json_object(); /* the --label flags; detected ones are added below */
    char **gpu_ids = NULL;          /* gpus.h; gpus of them */
    int ngpu_ids = 0;
    const char *server = getenv("DDP_SERVER"), *token_file = NULL, *name = NULL, *address = NULL,
               *work_dir = NULL, *port_range = "29500-29999";
    long slots = -1, grace = 30, orphan = 30;
    enum cgroup_kind cgroup = CGROUP_AUTO;
    enum usermap_isolation isolation = USERMAP_AUTO;
    const char *user_map_path = NULL;
    struct usermap *user_map = NULL;
    int level = LOG_INFO;
    char *own_name = NULL, *own_address = NULL, *own_work = NULL, *own_tf = NULL;
    char *token = NULL, *abs_work = NULL, *first_server = NULL;
    int rc = 2;
    struct ddp_err err;
    err_clear(&err);

    log_init("ddp-agent", LOG_INFO);
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 's':
            server = optarg;
            break;
        case 't':
            token_file = optarg;
            break;
        case 'n':
            name = optarg;
            break;
        case 'a':
            address = optarg;
            break;
        case 'S':
            if (args_parse_long("--slots", optarg, 1, 4096, &slots, &err) < 0) {
                rc = usage_error("%s", err.msg);
                goto out;
            }
            break;
        case 'p':
            port_range = optarg;
            break;
        case 'w':
            work_dir = optarg;
            break;
        case 'g':
            if (args_parse_long("--grace", optarg, 0, 3600, &grace, &err) < 0) {
                rc = usage_error("%s", err.msg);
                goto out;
            }
            break;
        case 'o':
            if (args_parse_long("--orphan-timeout", optarg, 0, 86400, &orphan, &err) < 0) {
                rc = usage_error("%s", err.msg);
                goto out;
            }
            break;
        case 'c':
            if (cgroup_kind_parse(optarg, &cgroup, &err) < 0) {
                rc = usage_error("%s", err.msg);
                goto out;
            }
            break;
        case 'i':
            if (usermap_isolation_parse(optarg, &isolation, &err) < 0) {
                rc = usage_error("%s", err.msg);
                goto out;
            }
            break;
        case 'u':
            user_map_path = optarg;
            break;
        case 'L': {
            const char *eq = strchr(optarg, '=');
            if (!eq || !label_key_ok(optarg, (size_t)(eq - optarg)) ||
                !label_value_ok(eq + 1, strlen(eq + 1))) {
                rc = usage_error("--label: '%s' is not K=V with K 1..63 of [A-Za-z0-9._/-] and V "
                                 "0..63 of [A-Za-z0-9._-]",
                                 optarg);
                goto out;
            }
            char *key = xstrndup(optarg, (size_t)(eq - optarg));
            json_object_set_new(labels, key, json_string(eq + 1));
            free(key);
            break;
        }
        case 'l':
            level = log_level_parse(optarg);
            if (level < 0) {
                rc =
                    usage_error("--log-level: '%s' is not one of debug, info, warn, error", optarg);
                goto out;
            }
            log_set_level((enum log_level)level);
            break;
        case 'h':
            usage_help();
            rc = 0;
            goto out;
        case 'V':
            printf("ddp-agent %s (commit %s)\n", DDP_VERSION, DDP_COMMIT);
            rc = 0;
            goto out;
        default:
            rc = usage_error("unknown or incomplete option '%s'", argv[optind - 1]);
            goto out;
        }
    }
    if (optind < argc) {
        rc = usage_error("unexpected argument '%s'", argv[optind]);
        goto out;
    }
    /* Only an absent server means the local default: an empty one is a configuration
     * mistake (a unit's --server ${DDP_SERVER} with DDP_SERVER unset), and an agent that
     * quietly dials 127.0.0.1 would never register where it was meant to. */
    if (server && !*server) {
        rc = usage_error("%s", "--server: empty URL (give ddpd's http:// or https:// URL, or "
                               "leave --server and DDP_SERVER unset for " AGENT_DEFAULT_SERVER ")");
        goto out;
    }
    if (!server)
        server = AGENT_DEFAULT_SERVER;
    struct srvlist servers;
    if (srvlist_parse(server, &servers, &err) < 0) {
        rc = usage_error("--server: %s", err.msg);
        goto out;
    }
    first_server = xstrdup(servers.urls[0]);
    srvlist_release(&servers);
    long lo, hi;
    if (args_parse_range("--port-range", port_range, 1, 65535, &lo, &hi, &err) < 0) {
        rc = usage_error("%s", err.msg);
        goto out;
    }
    if (!name) {
        char host[256] = "";
        if (gethostname(host, sizeof(host) - 1) != 0 || !host[0])
            memcpy(host, "node", 5);
        host[63] = '\0';
        own_name = xstrdup(host);
        name = own_name;
    }
    if (!name_ok(name)) {
        rc = usage_error("--name: '%s' must be 1..63 characters of [A-Za-z0-9._-]", name);
        goto out;
    }
    int iso_rc =
        usermap_isolation_decide(isolation, geteuid(), user_map_path != NULL, &isolation, &err);
    if (iso_rc == DDP_EINVAL) {
        rc = usage_error("%s", err.msg);
        goto out;
    }
    if (iso_rc < 0) {
        log_error("%s", err.msg);
        rc = 1;
        goto out;
    }
    const char *home = getenv("DDP_HOME");
    if (!home || !*home)
        home = ".ddp";
    if (!work_dir) {
        own_work = xasprintf("%s/agent-%s", home, name);
        work_dir = own_work;
    }

    /* Everything below is no usage error any more. */
    rc = 1;
    if (user_map_path && usermap_load(user_map_path, &user_map, &err) < 0) {
        log_error("cannot use --user-map: %s", err.msg);
        goto out;
    }
    say_isolation(isolation, user_map_path, user_map);
    int found = count_gpus(), gpus = 0;
    const char *visible = getenv("CUDA_VISIBLE_DEVICES");
    gpus_list(visible, found, &gpu_ids, &gpus);
    ngpu_ids = gpus;
    if (visible)
        log_info("GPUs: %d given by CUDA_VISIBLE_DEVICES=%.200s (of %d on the node): only those "
                 "are handed out",
                 gpus, visible, found);
    if (slots < 0)
        slots = gpus > 0 ? gpus : sysconf(_SC_NPROCESSORS_ONLN);
    if (slots < 1)
        slots = 1;
    if (!address) {
        own_address = route_address(first_server); /* the route to the first address */
        address = own_address;
    }
    if (fs_mkdir_p(work_dir, 0755, &err) < 0) {
        log_error("cannot create the work dir: %s", err.msg);
        goto out;
    }
    abs_work = realpath(work_dir, NULL);
    if (!abs_work) {
        log_error("work dir %s: %s", work_dir, strerror(errno));
        goto out;
    }

    /* Signals: every thread blocks these; the I/O thread takes them from a signalfd. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGUSR1); /* a preemption notice to relay (worker.c) */
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    /* Orphaned grandchildren of workers come to us, so that we reap them too. */
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
        log_warn("cannot become a subreaper: %s", strerror(errno));

    const char *env_token = getenv("DDP_AGENT_TOKEN");
    if (!token_file && env_token && *env_token) {
        token = xstrdup(env_token);
    } else {
        if (!token_file) {
            own_tf = xasprintf("%s/agent.token", home);
            token_file = own_tf;
        }
        token = read_token(token_file);
        if (!token) {
            rc = 0; /* stopped while waiting, or unreadable (logged) */
            if (access(token_file, F_OK) == 0)
                rc = 1;
            goto out;
        }
    }

    agent_forget_secrets();

    cfg.server = server;
    cfg.token = token;
    cfg.token_file = token_file;
    cfg.name = name;
    cfg.address = address;
    cfg.slots = (int)slots;
    cfg.gpus = gpus;
    cfg.gpu_ids = gpu_ids;
    cfg.port_range = port_range;
    cfg.work_dir = abs_work;
    cfg.grace_s = (int)grace;
    cfg.orphan_timeout_s = (int)orphan;
    cfg.cgroup = cgroup;
    cfg.isolation = isolation;
    cfg.user_map = user_map;
    detect_labels(labels, cfg.gpus);
    cfg.labels = labels;
    rc = agent_run(&cfg);
out:
    json_decref(labels);
    gpus_free(gpu_ids, ngpu_ids);
    usermap_free(user_map);
    free(own_name);
    free(own_address);
    free(first_server);
    free(own_work);
    free(own_tf);
    free(token);
    free(abs_work);
    return rc;
}
