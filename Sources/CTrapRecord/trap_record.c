#include "trap_record.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#define IAP_TRAP_RECORD_MAX 1024
#define IAP_TRAP_PATH_MAX 4096

static char record_path[IAP_TRAP_PATH_MAX];
static char record[IAP_TRAP_RECORD_MAX];
// 0 while nothing is held. Set after the bytes are written and cleared before they change, so the handler never
// writes a record half replaced.
static atomic_size_t record_length;

static const int trap_signals[] = { SIGILL, SIGTRAP, SIGSEGV, SIGBUS, SIGFPE, SIGABRT };
#define TRAP_SIGNAL_COUNT (sizeof(trap_signals) / sizeof(trap_signals[0]))
static struct sigaction previous_actions[TRAP_SIGNAL_COUNT];

// Whether the signal is the process's own fault: raised by the kernel for an instruction (a Swift trap is `ud2`, which
// raises SIGILL; a bad access SIGSEGV), or by the process itself (abort). A signal another process sends (kill -SEGV)
// says nothing about the message in hand.
static int raised_by_the_process(const siginfo_t *info) {
    if (info == NULL) return 0;
    if (info->si_code > 0) return 1;
    return info->si_code == SI_TKILL && info->si_pid == getpid();
}

static void write_record(void) {
    size_t length = atomic_load(&record_length);
    if (length == 0 || record_path[0] == '\0') return;
    int fd = open(record_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return;
    const char *next = record;
    while (length > 0) {
        ssize_t written = write(fd, next, length);
        if (written < 0) {
            if (errno == EINTR) continue;
            break;
        }
        next += written;
        length -= (size_t)written;
    }
    fsync(fd);
    close(fd);
}

static void on_trap(int signal_number, siginfo_t *info, void *context) {
    (void)context;
    int saved_errno = errno;
    if (raised_by_the_process(info)) write_record();
    // Once only: the action installed before takes this signal, and any later one.
    for (size_t index = 0; index < TRAP_SIGNAL_COUNT; index++) {
        if (trap_signals[index] == signal_number) sigaction(signal_number, &previous_actions[index], NULL);
    }
    errno = saved_errno;
    // A faulting instruction runs again on return and raises the signal again, now to that action. A signal sent
    // (abort's raise, kill) is not raised again by itself: raise it, delivered once this handler returns.
    if (info == NULL || info->si_code <= 0) raise(signal_number);
}

int iap_trap_record_install(const char *path) {
    size_t length = strlen(path);
    if (length == 0 || length >= IAP_TRAP_PATH_MAX) return -1;
    memcpy(record_path, path, length + 1);
    for (size_t index = 0; index < TRAP_SIGNAL_COUNT; index++) {
        struct sigaction action;
        memset(&action, 0, sizeof(action));
        action.sa_sigaction = on_trap;
        action.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigemptyset(&action.sa_mask);
        if (sigaction(trap_signals[index], &action, &previous_actions[index]) != 0) return -1;
    }
    return 0;
}

int iap_trap_record_hold(const void *bytes, size_t length) {
    if (length > IAP_TRAP_RECORD_MAX) return -1;
    atomic_store(&record_length, 0);
    memcpy(record, bytes, length);
    atomic_store(&record_length, length);
    return 0;
}

void iap_trap_record_release(void) {
    atomic_store(&record_length, 0);
}
