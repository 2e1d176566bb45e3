// The record a worker that traps leaves behind: which message it had in hand alone (see WorkerRuntime's TrapRecords).
// Kept in C because the writer runs inside a signal handler, where only async-signal-safe calls are allowed.
#ifndef IAP_TRAP_RECORD_H
#define IAP_TRAP_RECORD_H

#include <stddef.h>

/// Installs the handler for the signals a trap raises (SIGILL, SIGTRAP, SIGSEGV, SIGBUS, SIGFPE, and SIGABRT the
/// process raised itself); `path` is the file it writes. The handler writes the held record, if any, then hands the
/// signal to the action installed before (the Swift runtime's backtracer, or the default: the process dies by it).
/// Returns 0, or -1 when `path` is too long or a handler cannot be installed. Call once per process.
int iap_trap_record_install(const char *path);

/// Holds `length` bytes (at most 1,024) as the record to write if the process traps; replaces what was held.
/// Returns 0, or -1 when the record is too long.
int iap_trap_record_hold(const void *bytes, size_t length);

/// Holds nothing: a trap from now on writes no record.
void iap_trap_record_release(void);

#endif
