/*
 * report.c - rank 0's report lines (trainer/report.h).
 */
#include "trainer/report.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "trainer/train.h"

static void write_metrics(int fd, const char *line)
{
    size_t len = strlen(line), off = 0;
    while (off < len) {
        ssize_t k = write(fd, line + off, len - off);
        if (k <= 0) {
            log_warn("cannot write metrics to DDP_METRICS_FD %d", fd);
            return;
        }
        off += (size_t)k;
    }
}

/* v as a JSON number with prec decimals into b, or null when it is not finite (a diverged
 * run's NaN or inf loss, a perplexity past DBL_MAX): the line stays JSON, which the agent
 * relays only when it parses. Said once on stderr. */
static const char *jnum(char *b, size_t n, double v, int prec)
{
    static int warned;
    if (!isfinite(v)) {
        if (!warned)
            log_warn("a reported value is %s (the training diverged?): reported as null",
                     isnan(v) ? "NaN" : "infinite");
        warned = 1;
        snprintf(b, n, "null");
        return b;
    }
    if (fabs(v) >= 1e15)
        snprintf(b, n, "%.6e", v); /* a huge perplexity fits, and stays a JSON number */
    else
        snprintf(b, n, "%.*f", prec, v);
    return b;
}

/* A learning rate as a JSON number: six significant digits (it spans decades). */
static const char *jlr(char *b, size_t n, double v)
{
    if (!isfinite(v))
        return jnum(b, n, v, 0);
    snprintf(b, n, "%.6g", v);
    return b;
}

void report_classifier(const struct report_at *at, const struct report_run *run, double loss,
                       double test_acc, double samples_per_s, double secs)
{
    char th[48];
    train_format_thousands(samples_per_s, th, sizeof(th));
    printf("epoch %u/%d | loss %.4f | test acc %.4f | %s samples/s\n", at->epoch + 1, run->epochs,
           loss, test_acc, th);
    fflush(stdout);
    if (run->metrics_fd < 0)
        return;
    char line[512], l[32], a[32], sp[32], lr[32];
    snprintf(line, sizeof(line),
             "{\"epoch\": %u, \"epochs\": %d, \"loss\": %s, \"test_acc\": %s, "
             "\"samples_per_s\": %s, \"lr\": %s, \"world_size\": %d, \"generation\": %d, "
             "\"time_s\": %.3f}\n",
             at->epoch + 1, run->epochs, jnum(l, sizeof(l), loss, 4),
             jnum(a, sizeof(a), test_acc, 4), jnum(sp, sizeof(sp), samples_per_s, 1),
             jlr(lr, sizeof(lr), run->lr), run->world_size, run->generation, secs);
    write_metrics(run->metrics_fd, line);
}

void report_language(const struct report_at *at, const struct report_run *run, double loss,
                     double val_loss, double next_byte_acc, double tokens_per_s,
                     double samples_per_s, double secs)
{
    double ppl = exp(val_loss);
    char th[48];
    train_format_thousands(tokens_per_s, th, sizeof(th));
    printf("epoch %u/%d | step %llu | loss %.4f | val loss %.4f nats/byte | ppl %.3f | "
           "next-byte acc %.4f | %s tokens/s | lr %.3g\n",
           at->epoch + 1, run->epochs, (unsigned long long)run->global_step, loss, val_loss, ppl,
           next_byte_acc, th, run->lr);
    fflush(stdout);
    if (run->metrics_fd < 0)
        return;
    char where[128], line[768];
    if (at->end_of_epoch)
        snprintf(where, sizeof(where), "\"epoch\": %u", at->epoch + 1);
    else
        snprintf(where, sizeof(where), "\"epoch\": %u, \"step\": %zu, \"steps\": %zu", at->epoch,
                 at->step, at->steps);
    char l[32], vl[32], pp[32], nb[32], tp[32], sp[32], lr[32];
    snprintf(line, sizeof(line),
             "{%s, \"epochs\": %d, \"epoch_progress\": %.4f, \"global_step\": %llu, "
             "\"loss\": %s, \"val_loss\": %s, \"perplexity\": %s, "
             "\"next_byte_acc\": %s, \"tokens_per_s\": %s, \"samples_per_s\": %s, "
             "\"lr\": %s, \"world_size\": %d, \"generation\": %d, \"time_s\": %.3f}\n",
             where, run->epochs, at->progress, (unsigned long long)run->global_step,
             jnum(l, sizeof(l), loss, 4), jnum(vl, sizeof(vl), val_loss, 4),
             jnum(pp, sizeof(pp), ppl, 4), jnum(nb, sizeof(nb), next_byte_acc, 4),
             jnum(tp, sizeof(tp), tokens_per_s, 1), jnum(sp, sizeof(sp), samples_per_s, 1),
             jlr(lr, sizeof(lr), run->lr), run->world_size, run->generation, secs);
    write_metrics(run->metrics_fd, line);
}
