/*
 * exitcodes.c - names of the worker exit codes.
 */
#include "common/exitcodes.h"

#include <stddef.h>

const char *exitcode_str(int code)
{
    switch (code) {
    case DDP_EXIT_OK:
        return "ok";
    case DDP_EXIT_FAILURE:
        return "failure";
    case DDP_EXIT_USAGE:
        return "usage error";
    case DDP_EXIT_DATA:
        return "data error";
    case DDP_EXIT_RENDEZVOUS:
        return "rendezvous failed";
    case DDP_EXIT_PORT_IN_USE:
        return "port in use";
    case DDP_EXIT_PEER_LOST:
        return "peer lost";
    case DDP_EXIT_CHECKPOINT:
        return "checkpoint error";
    case DDP_EXIT_DEVICE:
        return "device error";
    case DDP_EXIT_HANG:
        return "hang";
    case DDP_EXIT_PREEMPTED:
        return "preempted";
    default:
        return NULL;
    }
}
