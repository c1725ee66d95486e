package containers

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/moby/moby/client"
)

// TestRestartWhilePortTaken: a restart whose container finds its host
// port taken by another process starts it again once the port is free.
func TestRestartWhilePortTaken(t *testing.T) {
	r := RestartablePostgres(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cli, err := docker(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cli.Close() }()
	timeout := 0
	if _, err := cli.ContainerStop(ctx, r.ctr.GetContainerID(), client.ContainerStopOptions{Timeout: &timeout}); err != nil {
		t.Fatal(err)
	}
	// Another process takes the port while the container is down, and
	// lets it go a moment later.
	l, err := net.Listen("tcp", hostPortOf(r.DSN))
	if err != nil {
		t.Fatalf("take the stopped container's port: %v", err)
	}
	free := time.AfterFunc(restartStartPause+200*time.Millisecond, func() { _ = l.Close() })
	defer free.Stop()
	if err := r.Restart(ctx); err != nil {
		t.Fatalf("restart while the port was taken for %v: %v", restartStartPause+200*time.Millisecond, err)
	}
}
