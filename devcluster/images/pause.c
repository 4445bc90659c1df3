/*
 * A pod sandbox's pause process, doing what Kubernetes' build/pause/linux/pause.c does:
 * sleep until SIGINT or SIGTERM (then exit 0), reap every child on SIGCHLD (as PID 1 of a pod
 * with a shared PID namespace it inherits orphans), print a version for -v.
 * Built static by devcluster/build_node.sh: gcc -static -O2 -o pause pause.c
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define VERSION "dtr-3.10"

static void sigdown(int signo) {
  psignal(signo, "Shutting down, got signal");
  exit(0);
}

static void sigreap(int signo) {
  (void)signo;
  int saved = errno;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
  errno = saved;
}

static void on(int signo, void (*handler)(int), int flags) {
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = handler;
  sa.sa_flags = flags;
  sigemptyset(&sa.sa_mask);
  if (sigaction(signo, &sa, NULL) < 0) {
    perror("sigaction");
    exit(1);
  }
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-v") == 0) {
      printf("pause.c %s\n", VERSION);
      return 0;
    }
  }
  if (getpid() != 1) {
    /* Not an error, but it will not reap the pod's orphans. */
    fprintf(stderr, "Warning: pause should be the first process\n");
  }
  on(SIGINT, sigdown, 0);
  on(SIGTERM, sigdown, 0);
  on(SIGCHLD, sigreap, SA_NOCLDSTOP | SA_RESTART);
  for (;;) {
    pause();
  }
  fprintf(stderr, "Error: infinite loop terminated\n");
  return 42;
}
