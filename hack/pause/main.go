package main

import (
	"context"
	"os/signal"
	"syscall"
)

func main() {
	// Signals only: as PID 1 of a sandbox, the process is sent nothing else
	// worth acting on, and the kernel ignores a signal PID 1 has no handler for.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	<-ctx.Done()
}
