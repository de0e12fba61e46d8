/*
 * main.c - ddpd: flags, token files, then the HTTP server plus the ticker (this thread)
 * until SIGTERM or SIGINT.
 *
 * Signals are blocked in every thread; the main thread takes them with sigtimedwait(),
 * which doubles as the ~200 ms tick of coord_tick().
 *
 * Cluster mode (--cluster, docs/ha.md): the tick also asks the embedded dqlite node who leads
 * (server/replica.h). Winning the leadership loads a coordinator from the replicated store and
 * opens the gate to it (server/gate.h); losing it retires that coordinator at once. Only this
 * thread changes the role, so the coordinator it ticks is the one it installed.
 */
#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/args.h"
#include "common/fsutil.h"
#include "common/log.h"
#include "common/randutil.h"
#include "common/sdnotify.h"
#include "common/timeutil.h"
#include "common/tokenfile.h"
#include "common/xalloc.h"
#include "server/coord.h"
#include "server/gate.h"
#include "server/http.h"
#include "server/replica.h"
#include "server/store.h"
#include "ddp_version.h"

#define TICK_MS 200

static void ddpd_usage(FILE *f)
{
    fprintf(f,
            "usage: ddpd [options]\n"
            "\n"
            "The ddp coordinator: jobs, nodes and rank assignment over HTTP/JSON, kept in SQLite.\n"
            "\n"
            "  --listen HOST:PORT        address to serve on (default 127.0.0.1:8470)\n"
            "  --db PATH                 SQLite database (default $DDP_HOME/ddp.db; DDP_HOME\n"
            "                            defaults to ./.ddp and is created)\n"
            "  --token-file F            the first admin's token (default user.token next to\n"
            "                            the database; created with a random token, mode 0600,\n"
            "                            if missing). The first start makes user 'admin' hold\n"
            "                            it; later starts only say whose it is\n"
            "  --agent-token-file F      bootstrap token, with which agents register (default\n"
            "                            agent.token next to the database; created like the\n"
            "                            admin's). It can only register: each node then beats\n"
            "                            with the credential it got at registration\n"
            "  --max-connections N       HTTP connections at once (default 16384; the soft\n"
            "                            RLIMIT_NOFILE is raised to the hard one at start)\n"
            "  --max-connections-per-ip N  from one address at once (default 512)\n"
            "  --idle-timeout SECONDS    close a connection silent this long: a stalled request\n"
            "                            head or body, or keep-alive (default 10, 3..3600: above\n"
            "                            a held heartbeat's 2 s)\n"
            "  --max-user-priority N     the highest job priority a non-admin may ask (default\n"
            "                            0: users may lower theirs; -1000..1000)\n"
            "  --job-ttl SECONDS         delete finished jobs (their events, metrics and logs)\n"
            "                            this long after they ended (default 0: keep them\n"
            "                            until 'ddpctl delete')\n"
            "  --max-nodes N             registered nodes at most (default 4096)\n"
            "  --max-jobs-per-user N     jobs not yet ended per user at most (default 10000)\n"
            "  --node-timeout SECONDS    a node silent this long is LOST (default 5, 1..3600)\n"
            "  --suspect-timeout SECONDS a node accused by a failed rank (an exit 6 naming it,\n"
            "                            or its job's first failure) is LOST unless it beats\n"
            "                            within this (default 1, at most --node-timeout;\n"
            "                            0 = off, decimals allowed)\n"
            "  --tls-cert F --tls-key F  serve HTTPS with this PEM certificate and key\n"
            "\n"
            "Cluster mode (docs/ha.md): replicas on dqlite, the Raft leader's one serves:\n"
            "  --cluster                 keep the state in the replicated store of an embedded\n"
            "                            dqlite node instead of --db\n"
            "  --node-id N               this replica's node (1 founds the cluster on its first\n"
            "                            start; every other new node needs --join)\n"
            "  --raft-address IP:PORT    where the node listens for the other replicas\n"
            "  --join IP:PORT,...        raft addresses of members: a new node joins as a voter\n"
            "  --data-dir DIR            the node's data (default $DDP_HOME/raft)\n"
            "  --advertise URL           this replica's API URL as clients reach it (default\n"
            "                            from --listen); the others redirect to the leader's\n"
            "  --raft-latency-ms MS      the network's round trip: Raft's heartbeat and election\n"
            "                            timeout scale with it (default: dqlite's, an election\n"
            "                            timeout of 3 s; 20 gives 300 ms)\n"
            "  --recover ID=IP:PORT,...  after a lost quorum, with this replica stopped: make\n"
            "                            these the only voters in --data-dir, then exit\n"
            "                            (docs/ha.md, \"Lost quorum\")\n"
            "  --log-level LEVEL         debug, info, warn, error or off (default info)\n"
            "  --version                 print the version and the git commit, and exit\n"
            "  --help                    this text\n");
}

/* Reads the token at path (common/tokenfile.h: refused when empty, short or not a regular
 * file; a warning when others may read it), creating it with a random token (mode 0600) if
 * missing. */
static int ddpd_token(const char *path, const char *what, char **out, struct ddp_err *err)
{
    int rc = token_file_read(path, what, out, err);
    if (rc == DDP_ENOTFOUND) {
        char tok[65];
        if (rand_hex(tok, 32) != 0)
            return err_set(err, DDP_EIO, "no randomness for the %s token", what);
        char line[80];
        int n = snprintf(line, sizeof(line), "%s\n", tok);
        rc = fs_write_atomic(path, line, (size_t)n, 0600, err);
        if (rc)
            return rc;
        log_info("created %s token file=%s", what, path);
        *out = xstrdup(tok);
        return 0;
    }
    if (rc)
        return rc;
    log_info("using %s token file=%s", what, path);
    return 0;
}

/* The cluster side of the tick (cluster mode): who leads, and the gate following it. */
struct ddpd_cluster {
    struct replica *rep;
    struct gate *gate;
    const char *advertise;
    const char *user_token;
    const struct coord_opts *copts;
    struct coord *leading; /* the coordinator installed in the gate, or NULL */
    int probe_failures;
    int start_failures; /* leads, but the coordinator would not start: in a row */
    int give_up;        /* leads, cannot serve, could not hand over: ddpd exits (its node
                         * stopped, the others elect a leader) */
    char leader[512];
};

static void ddpd_cluster_step(struct ddpd_cluster *cl)
{
    struct ddp_err err = {0};
    int self = 0;
    char leader[512];
    if (replica_poll(cl->rep, &self, leader, sizeof(leader), &err) != 0) {
        /* The own node does not answer: after three polls in a row, stop leading (its writes
         * would fail anyway). */
        log_warn_limited(2000, "cluster: asking the dqlite node who leads: %s", err.msg);
        /* A coordinator that retired itself is replaced at once, probe or not. */
        if (++cl->probe_failures < 3 && !(cl->leading && coord_retired(cl->leading)))
            return;
        self = 0;
        leader[0] = '\0';
    } else {
        cl->probe_failures = 0;
    }
    if (cl->leading && (coord_retired(cl->leading) || (self && !replica_still_ours(cl->rep)))) {
        /* Its store said "not leader", or another replica won since it was loaded (the
         * leadership went and came back between two polls): its memory may be stale. The
         * next poll that finds this node leading loads a coordinator afresh. */
        int disk = coord_storage_failed(cl->leading);
        log_warn("cluster: this replica's coordinator stops (%s): it is loaded again if this "
                 "replica still leads",
                 disk                         ? "its own disk failed a write"
                 : coord_retired(cl->leading) ? "its store lost the leadership"
                                              : "another replica led meanwhile");
        gate_follow(cl->gate, "");
        cl->leading = NULL;
        /* A replica whose disk takes writes leads in its place: handed over, or, where the
         * transfer fails (libraft's needs the target caught up, which a leader that cannot
         * append may never see), by the election that stopping this node starts. */
        if (disk && replica_hand_over(cl->rep) < 0)
            cl->give_up = 1;
        return;
    }
    if (self && !cl->leading) {
        int64_t t0 = time_mono_ms();
        struct store *st = NULL;
        struct coord *c = NULL;
        /* No old leader's URL while loading: a client sent there would be sent back here. */
        gate_follow(cl->gate, "");
        struct coord_opts copts = *cl->copts;
        int rc = replica_open_store(cl->rep, &st, &err);
        copts.fence_epoch = replica_epoch(cl->rep);
        if (rc != 0 ||
            coord_open_store(st, NULL, cl->advertise, &copts, time_mono_ms(), &c, &err) != 0 ||
            coord_users_bootstrap(c, cl->user_token, time_mono_ms(), &err) != 0) {
            coord_close(c);
            log_warn_limited(1000,
                             "cluster: this node leads, but the coordinator cannot start "
                             "yet: %s",
                             err.msg);
            /* let a replica that can serve lead: handed over after 5 failed starts, and
             * after 10; failing both times while the others could elect without this node,
             * nothing is left but to stop leading (with no such majority it stays up) */
            int n = ++cl->start_failures;
            if (n == 5 || n == 10) {
                log_warn("cluster: handing the leadership over after %d failed starts", n);
                int hrc = replica_hand_over(cl->rep);
                if (n == 10 && hrc < 0)
                    cl->give_up = 1;
                else if (n == 10 || hrc == 0)
                    cl->start_failures = 0;
            }
            return;
        }
        cl->start_failures = 0;
        cl->leading = c;
        gate_lead(cl->gate, c, cl->advertise);
        log_info("cluster: this replica leads now (%s): state loaded in %lld ms", cl->advertise,
                 (long long)(time_mono_ms() - t0));
        if (sdnotify_send("STATUS=leader", &err) < 0)
            log_warn("systemd notification: %s", err.msg);
        return;
    }
    if (self)
        return;
    if (cl->leading) {
        log_warn("cluster: %s%s%s: its coordinator stops",
                 cl->probe_failures >= 3 ? "the own dqlite node does not answer"
                                         : "this replica lost the leadership",
                 leader[0] ? "; the leader is " : "", leader);
        cl->leading = NULL;
    }
    if (strcmp(leader, cl->leader) != 0) {
        if (leader[0])
            log_info("cluster: following the leader at %s", leader);
        else
            log_info("cluster: no leader known");
        snprintf(cl->leader, sizeof(cl->leader), "%s", leader);
    }
    gate_follow(cl->gate, leader);
}

/* Splits the comma-separated --join into at most max numeric HOST:PORT items (pointers into
 * s, which is modified). */
static int ddpd_split_join(char *s, char **out, size_t max, size_t *n, struct ddp_err *err)
{
    *n = 0;
    for (char *save = NULL, *tok = strtok_r(s, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char host[256];
        int port;
        if (*n == max)
            return err_set(err, DDP_EINVAL, "--join: more than %zu addresses", max);
        if (args_parse_hostport("--join", tok, host, (int)sizeof(host), &port, err) != 0 ||
            replica_check_address("--join", tok, err) != 0)
            return DDP_EINVAL;
        out[(*n)++] = tok;
    }
    if (*n == 0)
        return err_set(err, DDP_EINVAL, "--join: no address (want IP:PORT,...)");
    return 0;
}

/* --recover ID=IP:PORT,...: the new voters of a cluster that lost its quorum, written into this
 * stopped replica's data (server/replica.h); 0, 1 on failure, 2 on a bad list. */
static int ddpd_recover(const char *list, uint64_t node_id, const char *raft, const char *data_dir)
{
    struct ddp_err err = {0};
    uint64_t ids[16];
    char *addrs[16];
    size_t n = 0;
    char *copy = xstrdup(list), *dir_owned = NULL;
    int status = 2;
    for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '='), host[256];
        long id;
        int port;
        if (n == 16 || !eq) {
            err_set(&err, DDP_EINVAL, "--recover: '%s': want ID=IP:PORT (at most 16)", tok);
            goto out;
        }
        *eq = '\0';
        if (args_parse_long("--recover id", tok, 1, 1L << 53, &id, &err) != 0 ||
            args_parse_hostport("--recover address", eq + 1, host, (int)sizeof(host), &port,
                                &err) != 0)
            goto out;
        ids[n] = (uint64_t)id;
        addrs[n++] = eq + 1;
    }
    if (n == 0) {
        err_set(&err, DDP_EINVAL, "--recover: no member (want ID=IP:PORT,...)");
        goto out;
    }
    if (!node_id || !raft) {
        err_set(&err, DDP_EINVAL, "--recover needs --node-id and --raft-address");
        goto out;
    }
    if (!data_dir) {
        const char *home = getenv("DDP_HOME");
        data_dir = dir_owned = xasprintf("%s/raft", home && *home ? home : ".ddp");
    }
    status = 1;
    if (replica_recover(node_id, raft, data_dir, ids, (const char *const *)addrs, n, &err) != 0)
        goto out;
    log_info("recovered %s: the cluster's voters are now the %zu given; copy this folder to the "
             "other members' --data-dir, then start them all",
             data_dir, n);
    status = 0;
out:
    if (status)
        fprintf(stderr, "ddpd: %s\n", err.msg);
    free(copy);
    free(dir_owned);
    return status;
}

/* Raises the soft limit of open files toward want (at most the hard limit), so that
 * --max-connections is ours and not the shell's 1,024; says so when it stays below. */
static void ddpd_raise_nofile(rlim_t want)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    rlim_t to = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want ? want : rl.rlim_max;
    if (to > rl.rlim_cur) {
        rl.rlim_cur = to;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            log_warn("cannot raise the open-file limit to %llu", (unsigned long long)to);
    }
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < want)
        log_warn("open-file limit %llu is below --max-connections + 256 = %llu: connections "
                 "past it are refused (raise LimitNOFILE / ulimit -Hn)",
                 (unsigned long long)rl.rlim_cur, (unsigned long long)want);
}

static char *ddpd_beside(const char *db, const char *name)
{
    char *copy = xstrdup(db);
    char *dir = dirname(copy);
    char *p = xasprintf("%s/%s", dir, name);
    free(copy);
    return p;
}

int main(int argc, char **argv)
{
    enum {
        O_LISTEN = 1,
        O_DB,
        O_TOKEN,
        O_AGENT_TOKEN,
        O_NODE_TIMEOUT,
        O_SUSPECT_TIMEOUT,
        O_CERT,
        O_KEY,
        O_LOG,
        O_MAX_NODES,
        O_MAX_JOBS,
        O_MAX_CONN,
        O_MAX_CONN_IP,
        O_IDLE,
        O_MAX_PRIO,
        O_JOB_TTL,
        O_HELP,
        O_VERSION,
        O_CLUSTER,
        O_NODE_ID,
        O_RAFT,
        O_JOIN,
        O_DATA_DIR,
        O_ADVERTISE,
        O_RAFT_LATENCY,
        O_RECOVER
    };
    static const struct option opts[] = {
        {"listen", required_argument, NULL, O_LISTEN},
        {"db", required_argument, NULL, O_DB},
        {"token-file", required_argument, NULL, O_TOKEN},
        {"agent-token-file", required_argument, NULL, O_AGENT_TOKEN},
        {"node-timeout", required_argument, NULL, O_NODE_TIMEOUT},
        {"suspect-timeout", required_argument, NULL, O_SUSPECT_TIMEOUT},
        {"tls-cert", required_argument, NULL, O_CERT},
        {"tls-key", required_argument, NULL, O_KEY},
        {"log-level", required_argument, NULL, O_LOG},
        {"max-nodes", required_argument, NULL, O_MAX_NODES},
        {"max-jobs-per-user", required_argument, NULL, O_MAX_JOBS},
        {"max-connections", required_argument, NULL, O_MAX_CONN},
        {"max-connections-per-ip", required_argument, NULL, O_MAX_CONN_IP},
        {"idle-timeout", required_argument, NULL, O_IDLE},
        {"max-user-priority", required_argument, NULL, O_MAX_PRIO},
        {"job-ttl", required_argument, NULL, O_JOB_TTL},
        {"help", no_argument, NULL, O_HELP},
        {"version", no_argument, NULL, O_VERSION},
        {"cluster", no_argument, NULL, O_CLUSTER},
        {"node-id", required_argument, NULL, O_NODE_ID},
        {"raft-address", required_argument, NULL, O_RAFT},
        {"join", required_argument, NULL, O_JOIN},
        {"data-dir", required_argument, NULL, O_DATA_DIR},
        {"advertise", required_argument, NULL, O_ADVERTISE},
        {"raft-latency-ms", required_argument, NULL, O_RAFT_LATENCY},
        {"recover", required_argument, NULL, O_RECOVER},
        {NULL, 0, NULL, 0},
    };
    const char *listen = "127.0.0.1:8470", *db = NULL, *token_file = NULL, *agent_file = NULL;
    const char *cert = NULL, *key = NULL;
    long node_timeout = 5, max_nodes = 4096, max_jobs = 10000;
    long max_conn = 16384, max_conn_ip = 512, idle_s = 10, max_prio = 0, job_ttl = 0;
    double suspect_timeout = 1.0;
    int suspect_given = 0;
    int level = -1; /* --log-level, or -1: DDP_LOG_LEVEL else info (log_init) */
    struct ddp_err err = {0};
    int status = 1, o;
    char host[256];
    int port = 0;
    char *db_owned = NULL, *tf_owned = NULL, *af_owned = NULL;
    char *user_token = NULL, *agent_token = NULL, *cert_pem = NULL, *key_pem = NULL;
    struct coord *coord = NULL;
    struct ddpd_server *server = NULL;
    int cluster = 0;
    long node_id = 0, raft_latency = 0;
    const char *raft = NULL, *data_dir = NULL, *advertise = NULL;
    char *join_owned = NULL, *data_owned = NULL, *adv_owned = NULL;
    char *join[16];
    size_t njoin = 0;
    const char *cluster_only = NULL, *recover = NULL;
    struct gate *gate = NULL;
    struct replica *rep = NULL;
    struct ddpd_cluster cl = {0};

    log_init("ddpd", LOG_INFO);
    opterr = 0;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case O_LISTEN:
            listen = optarg;
            break;
        case O_DB:
            db = optarg;
            break;
        case O_TOKEN:
            token_file = optarg;
            break;
        case O_AGENT_TOKEN:
            agent_file = optarg;
            break;
        case O_NODE_TIMEOUT:
            if (args_parse_long("--node-timeout", optarg, 1, 3600, &node_timeout, &err) != 0)
                goto usage;
            break;
        case O_SUSPECT_TIMEOUT:
            if (args_parse_double("--suspect-timeout", optarg, 0, 3600, &suspect_timeout, &err) !=
                0)
                goto usage;
            suspect_given = 1;
            break;
        case O_CERT:
            cert = optarg;
            break;
        case O_KEY:
            key = optarg;
            break;
        case O_LOG:
            level = log_level_parse(optarg);
            if (level < 0) {
                err_set(&err, DDP_EINVAL,
                        "--log-level: '%s' is not debug, info, warn, error or off", optarg);
                goto usage;
            }
            break;
        case O_MAX_NODES:
            if (args_parse_long("--max-nodes", optarg, 1, 1000000, &max_nodes, &err) != 0)
                goto usage;
            break;
        case O_MAX_JOBS:
            if (args_parse_long("--max-jobs-per-user", optarg, 1, 1000000, &max_jobs, &err) != 0)
                goto usage;
            break;
        case O_MAX_CONN:
            if (args_parse_long("--max-connections", optarg, 1, 1000000, &max_conn, &err) != 0)
                goto usage;
            break;
        case O_MAX_CONN_IP:
            if (args_parse_long("--max-connections-per-ip", optarg, 1, 1000000, &max_conn_ip,
                                &err) != 0)
                goto usage;
            break;
        case O_MAX_PRIO:
            if (args_parse_long("--max-user-priority", optarg, -1000, 1000, &max_prio, &err) != 0)
                goto usage;
            break;
        case O_JOB_TTL:
            if (args_parse_long("--job-ttl", optarg, 0, 100L * 365 * 86400, &job_ttl, &err) != 0)
                goto usage;
            break;
        case O_IDLE:
            if (args_parse_long("--idle-timeout", optarg, 3, 3600, &idle_s, &err) != 0)
                goto usage;
            break;
        case O_CLUSTER:
            cluster = 1;
            break;
        case O_NODE_ID:
            if (args_parse_long("--node-id", optarg, 1, 1L << 53, &node_id, &err) != 0)
                goto usage;
            cluster_only = "--node-id";
            break;
        case O_RAFT:
            raft = optarg;
            cluster_only = "--raft-address";
            break;
        case O_JOIN:
            free(join_owned);
            join_owned = xstrdup(optarg);
            if (ddpd_split_join(join_owned, join, 16, &njoin, &err) != 0)
                goto usage;
            cluster_only = "--join";
            break;
        case O_DATA_DIR:
            data_dir = optarg;
            cluster_only = "--data-dir";
            break;
        case O_ADVERTISE:
            advertise = optarg;
            cluster_only = "--advertise";
            break;
        case O_RAFT_LATENCY:
            if (args_parse_long("--raft-latency-ms", optarg, 1, 10000, &raft_latency, &err) != 0)
                goto usage;
            cluster_only = "--raft-latency-ms";
            break;
        case O_RECOVER:
            recover = optarg;
            cluster_only = "--recover";
            break;
        case O_HELP:
            ddpd_usage(stdout);
            return 0;
        case O_VERSION:
            printf("ddpd %s (commit %s)\n", DDP_VERSION, DDP_COMMIT);
            return 0;
        default:
            if (optopt)
                err_set(&err, DDP_EINVAL, "option %s needs a value", argv[optind - 1]);
            else
                err_set(&err, DDP_EINVAL, "unknown option: %s", argv[optind - 1]);
            goto usage;
        }
    }
    if (optind < argc) {
        err_set(&err, DDP_EINVAL, "unexpected argument: %s", argv[optind]);
        goto usage;
    }
    if (args_parse_hostport("--listen", listen, host, (int)sizeof(host), &port, &err) != 0)
        goto usage;
    if (suspect_timeout > (double)node_timeout) {
        if (suspect_given) {
            err_set(&err, DDP_EINVAL, "--suspect-timeout %g exceeds --node-timeout %ld",
                    suspect_timeout, node_timeout);
            goto usage;
        }
        suspect_timeout = (double)node_timeout;
    }
    if (!cluster && cluster_only) {
        err_set(&err, DDP_EINVAL, "%s needs --cluster", cluster_only);
        goto usage;
    }
    if (cluster) {
        char rhost[256];
        int rport;
        if (db) {
            err_set(&err, DDP_EINVAL,
                    "--db and --cluster exclude each other: a cluster keeps "
                    "its state in the replicated store (--data-dir)");
            goto usage;
        }
        if (!node_id || !raft) {
            err_set(&err, DDP_EINVAL, "--cluster needs --node-id and --raft-address");
            goto usage;
        }
        if (args_parse_hostport("--raft-address", raft, rhost, (int)sizeof(rhost), &rport, &err) !=
                0 ||
            replica_check_address("--raft-address", raft, &err) != 0)
            goto usage;
        if (advertise && strncmp(advertise, "http://", 7) != 0 &&
            strncmp(advertise, "https://", 8) != 0) {
            err_set(&err, DDP_EINVAL, "--advertise '%s': want http(s)://HOST[:PORT]", advertise);
            goto usage;
        }
        if (!advertise && port == 0) {
            err_set(&err, DDP_EINVAL,
                    "--listen %s: a cluster replica needs a fixed port (or --advertise URL)",
                    listen);
            goto usage;
        }
        if (!advertise &&
            (host[0] == '\0' || strcmp(host, "0.0.0.0") == 0 || strcmp(host, "::") == 0)) {
            err_set(&err, DDP_EINVAL,
                    "--listen %s serves every address: say which one clients "
                    "reach this replica at with --advertise URL",
                    listen);
            goto usage;
        }
    }
    if (recover)
        return ddpd_recover(recover, (uint64_t)node_id, raft, data_dir);
    if ((cert == NULL) != (key == NULL)) {
        err_set(&err, DDP_EINVAL, "--tls-cert and --tls-key go together");
        goto usage;
    }
    if (level >= 0) /* the flag wins over DDP_LOG_LEVEL, as in the agent */
        log_set_level((enum log_level)level);

    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    if (!db) {
        const char *home = getenv("DDP_HOME");
        if (!home || !*home)
            home = ".ddp";
        if (fs_mkdir_p(home, 0700, &err) != 0)
            goto fail;
        db = db_owned = xasprintf("%s/ddp.db", home);
        if (cluster && !data_dir)
            data_dir = data_owned = xasprintf("%s/raft", home);
    } else {
        char *copy = xstrdup(db);
        int rc = fs_mkdir_p(dirname(copy), 0700, &err);
        free(copy);
        if (rc)
            goto fail;
    }
    if (!token_file)
        token_file = tf_owned = ddpd_beside(db, "user.token");
    if (!agent_file)
        agent_file = af_owned = ddpd_beside(db, "agent.token");
    if (ddpd_token(token_file, "admin", &user_token, &err) != 0 ||
        ddpd_token(agent_file, "bootstrap (agent)", &agent_token, &err) != 0)
        goto fail;
    if (strcmp(user_token, agent_token) == 0) {
        err_set(&err, DDP_EINVAL, "the admin and bootstrap (agent) tokens must differ");
        goto fail;
    }
    if (cert && (fs_read_all(cert, 1 << 20, &cert_pem, NULL, &err) != 0 ||
                 fs_read_all(key, 1 << 20, &key_pem, NULL, &err) != 0))
        goto fail;

    int64_t suspect_ms = (int64_t)(suspect_timeout * 1000.0 + 0.5);
    struct coord_opts copts = {.node_timeout_ms = node_timeout * 1000,
                               .suspect_timeout_ms = suspect_ms > 0 ? suspect_ms : -1,
                               .max_nodes = max_nodes,
                               .max_jobs_per_user = max_jobs,
                               .max_user_priority = (int)max_prio,
                               .job_ttl_ms = (int64_t)job_ttl * 1000};
    if (cluster) {
        if (!advertise)
            advertise = adv_owned =
                xasprintf("%s://%s%s%s:%d", cert ? "https" : "http", strchr(host, ':') ? "[" : "",
                          host, strchr(host, ':') ? "]" : "", port);
        struct replica_opts ro = {.node_id = (uint64_t)node_id,
                                  .raft_address = raft,
                                  .join = (const char *const *)join,
                                  .njoin = njoin,
                                  .data_dir = data_dir,
                                  .advertise = advertise,
                                  .latency_ms = (int)raft_latency};
        if (replica_start(&ro, &rep, &err) != 0)
            goto fail;
        gate = gate_new(NULL);
        cl = (struct ddpd_cluster){.rep = rep,
                                   .gate = gate,
                                   .advertise = advertise,
                                   .user_token = user_token,
                                   .copts = &copts};
    } else {
        if (coord_open(db, &copts, time_mono_ms(), &coord, &err) != 0 ||
            coord_users_bootstrap(coord, user_token, time_mono_ms(), &err) != 0)
            goto fail;
        gate = gate_new(coord);
    }
    ddpd_raise_nofile((rlim_t)max_conn + 256);
    struct http_opts hopts = {host,
                              port,
                              agent_token,
                              cert_pem,
                              key_pem,
                              (unsigned)max_conn,
                              (unsigned)max_conn_ip,
                              (unsigned)idle_s};
    if (http_start(&hopts, gate, rep, &server, &err) != 0)
        goto fail;
    log_info("listening on %s://%s:%d %s=%s node_timeout=%lds suspect_timeout_ms=%lld%s",
             cert ? "https" : "http", host, http_port(server), cluster ? "cluster" : "db",
             cluster ? advertise : db, node_timeout, (long long)(suspect_ms > 0 ? suspect_ms : 0),
             suspect_ms > 0 ? "" : " (off)");
    if (job_ttl > 0)
        log_info("--job-ttl %ld s: finished jobs are deleted that long after they ended", job_ttl);
    /* Type=notify: the listener is up, so systemd may start what is ordered after ddpd. */
    if (sdnotify_send("READY=1", &err) < 0)
        log_warn("systemd notification: %s", err.msg);

    for (;;) {
        struct timespec ts = {0, TICK_MS * 1000000L};
        int sig = sigtimedwait(&sigs, NULL, &ts);
        if (sig == SIGTERM || sig == SIGINT) {
            log_info("signal %d: shutting down", sig);
            if (sdnotify_send("STOPPING=1", &err) < 0)
                log_warn("systemd notification: %s", err.msg);
            break;
        }
        if (cluster) {
            ddpd_cluster_step(&cl);
            if (cl.give_up) {
                replica_forgo_hand_over(rep); /* it just failed: the stop elects */
                err_set(&err, DDP_EUNAVAIL,
                        "cluster: this replica leads but can neither serve (see above) nor hand "
                        "the leadership over: ddpd stops, so that the other replicas elect a "
                        "leader (a replica whose disk failed is replaced: docs/ha.md)");
                goto fail;
            }
            if (cl.leading)
                coord_tick(cl.leading, time_mono_ms());
        } else {
            coord_tick(coord, time_mono_ms());
        }
    }
    status = 0;
    goto out;
usage:
    fprintf(stderr, "ddpd: %s\n", err.msg);
    ddpd_usage(stderr);
    return 2;
fail:
    log_error("%s", err.msg);
out:
    if (gate && cluster)
        gate_follow(gate, NULL); /* the coordinator retired: it writes nothing more */
    coord_shutdown(coord);
    http_stop(server); /* no request runs from here on: the replica may go */
    replica_stop(rep); /* the leadership handed over, the node stopped */
    if (gate)
        gate_free(gate); /* closes the coordinator */
    else
        coord_close(coord);
    free(join_owned);
    free(data_owned);
    free(adv_owned);
    free(db_owned);
    free(tf_owned);
    free(af_owned);
    free(user_token);
    free(agent_token);
    free(cert_pem);
    free(key_pem);
    return status;
}
