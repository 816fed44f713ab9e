/* pause: the process that holds a pod sandbox's namespaces. Sleeps until SIGINT or SIGTERM,
 * reaping any child it inherits as PID 1. Built statically into the offline kind node image's
 * registry.k8s.io/pause image (scripts/kind/build-node). */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) {
  (void)sig;
  _exit(0);
}

static void reap(int sig) {
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "-v") == 0) {
    puts("pause (gpu-vk kind node image)");
    return 0;
  }
  if (getpid() != 1) fprintf(stderr, "pause: warning: not running as PID 1\n");
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = stop;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sa.sa_handler = reap;
  sa.sa_flags = SA_NOCLDSTOP;
  sigaction(SIGCHLD, &sa, NULL);
  for (;;) pause();
}
