/*
 * report.h - what rank 0 says after an evaluation: the line on stdout ("epoch 3/10 | loss
 * ...") and the metrics line on DDP_METRICS_FD that the agent relays to ddpd (the contract
 * of docs/api.md). The figures come in already summed over the ranks; nothing here talks to
 * the other ranks.
 */
#ifndef DDP_TRAINER_REPORT_H
#define DDP_TRAINER_REPORT_H

#include <stddef.h>
#include <stdint.h>

/* Where the run stands. A language model reports between epochs too: then end_of_epoch is
 * 0 and step, steps say how far into the epoch (the metrics line's `step` and `steps`,
 * `epoch` the epochs done). */
struct report_at {
    uint32_t epoch;     /* 0-based epoch being trained */
    double progress;    /* epochs done, fractional: the dashboard's x */
    int end_of_epoch;   /* 1: the epoch's own report */
    size_t step, steps; /* between epochs: steps done of the epoch's steps */
};

/* The run's fixed facts a report carries. metrics_fd < 0: no metrics line. */
struct report_run {
    int epochs, world_size, generation, metrics_fd;
    uint64_t global_step;
    double lr; /* of the last step taken */
};

/* A classifier's epoch: mean training loss, test accuracy, samples/s and the seconds spent
 * training (mean over the ranks). */
void report_classifier(const struct report_at *at, const struct report_run *run, double loss,
                       double test_acc, double samples_per_s, double secs);

/* A language model's report: mean training loss, validation loss (nats/byte), next-byte
 * accuracy, tokens/s, windows/s and the seconds spent training. */
void report_language(const struct report_at *at, const struct report_run *run, double loss,
                     double val_loss, double next_byte_acc, double tokens_per_s,
                     double samples_per_s, double secs);

#endif
