/*
 * The sandbox ("pause") process of every pod of drover's test cluster: it
 * holds the pod's namespaces, reaps orphans (it is PID 1 of the pod when the
 * pod shares its PID namespace) and exits on SIGINT or SIGTERM. Built
 * static by up.sh, because no registry with registry.k8s.io/pause is
 * reachable.
 */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) { (void)sig; _exit(0); }

static void reap(int sig) {
	(void)sig;
	while (waitpid(-1, NULL, WNOHANG) > 0) {
	}
}

int main(void) {
	struct sigaction sa = {0};
	sa.sa_handler = stop;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sa.sa_handler = reap;
	sa.sa_flags = SA_NOCLDSTOP;
	sigaction(SIGCHLD, &sa, NULL);
	for (;;)
		pause();
	return 0;
}
