/*
 * text.h - byte-level text corpora for a language model (trainer/model_gpt.h): a file (gzip
 * or plain), or the fortune cookies of Debian's `fortunes` package, cut into windows.
 *
 * A corpus of len bytes with context T gives (len - 1) / T windows: window i is bytes
 * i*T .. i*T+T (T+1 bytes: T inputs, each followed by its target). They are stored as a
 * struct dataset (trainer/data.h) with x NULL, dim T+1, classes 256 and y the windows one
 * after the other (n * (T+1) bytes), so the sampler and the batching treat a window as a
 * sample.
 */
#ifndef DDP_TRAINER_TEXT_H
#define DDP_TRAINER_TEXT_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "trainer/data.h"

/* Default folder of the fortunes files; DDP_FORTUNES_DIR overrides it. */
#define TEXT_FORTUNES_DIR "/usr/share/games/fortunes"
/* Share of a corpus held out for validation when no validation file is given. */
#define TEXT_VALID_SHARE 0.1

/* What a corpus was, for the log line and the report. */
struct text_info {
    size_t train_bytes, valid_bytes;
    double unigram_nats; /* entropy of the training bytes' frequencies, nats per byte */
};

/*
 * Loads spec's training and validation windows for context ctx:
 *   "fortunes"              every fortune file (no extension: not the .dat indexes) of
 *                           TEXT_FORTUNES_DIR, by name, joined; the last 10% validate
 *   "text:FILE[,VALID]"     FILE; VALID, or the last 10% of FILE, validates
 * Errors: DDP_EINVAL for a bad spec (message names --data), DDP_ENOTFOUND/DDP_EIO for
 * unreadable files, DDP_EINVAL for a corpus too short for one window (naming the file).
 */
int text_load(const char *spec, int ctx, struct dataset *train, struct dataset *valid,
              struct text_info *info, struct ddp_err *err);

/* The windows of ctx bytes (+1) of buf[0..len) into out (see above); DDP_EINVAL naming what
 * when there is not one. */
int text_windows(const uint8_t *buf, size_t len, int ctx, const char *what, struct dataset *out,
                 struct ddp_err *err);

/* The entropy in nats per byte of the byte frequencies of buf[0..len). */
double text_unigram_entropy(const uint8_t *buf, size_t len);

#endif
