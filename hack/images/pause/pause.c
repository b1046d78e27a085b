/*
 * pause: the sandbox ("pause") container of lull's images (lull.dev/pause).
 *
 * It holds a pod's namespaces open and does nothing else: it sleeps in
 * pause() forever, reaps every child that is re-parented to it (SIGCHLD),
 * and exits 0 on SIGINT or SIGTERM. Built static by hack/images.sh:
 *
 *   gcc -static -Os -s -DVERSION='"3.10-lull"' -o pause pause.c
 *
 * `pause -v` prints the version and exits.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef VERSION
#define VERSION "dev"
#endif

static void sigdown(int signo) {
	static const char msg[] = "pause: shutting down on signal\n";
	(void)signo;
	/* Only async-signal-safe calls in a handler. */
	(void)!write(STDERR_FILENO, msg, sizeof(msg) - 1);
	_exit(0);
}

static void sigreap(int signo) {
	(void)signo;
	while (waitpid(-1, NULL, WNOHANG) > 0) {
	}
}

static int handle(int signo, void (*handler)(int), int flags) {
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = handler;
	sa.sa_flags = flags;
	sigemptyset(&sa.sa_mask);
	return sigaction(signo, &sa, NULL);
}

int main(int argc, char **argv) {
	if (argc > 1 && strcmp(argv[1], "-v") == 0) {
		printf("pause %s\n", VERSION);
		return 0;
	}
	if (getpid() != 1) {
		/* Not an error: containerd runs it as PID 1 of a pod's PID
		 * namespace only when the pod shares it. */
		fprintf(stderr, "pause: warning: not running as PID 1\n");
	}
	if (handle(SIGINT, sigdown, 0) < 0 || handle(SIGTERM, sigdown, 0) < 0 ||
	    handle(SIGCHLD, sigreap, SA_NOCLDSTOP | SA_RESTART) < 0) {
		perror("pause: sigaction");
		return 1;
	}
	for (;;) {
		pause();
	}
	fprintf(stderr, "pause: error: infinite loop terminated\n");
	return 42;
}
