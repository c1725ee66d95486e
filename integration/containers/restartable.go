package containers

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
)

// Restartable is a database server started for one test, which may
// restart it: its container publishes the server's port on a fixed port of
// 127.0.0.1, so the DSN stays valid across restarts and drivers reconnect
// to the restarted server on their own. No other test uses it; it is
// removed when the test ends.
type Restartable struct {
	// DSN is the server's DSN, of the form [Postgres] or [MySQL] returns.
	DSN string

	title    string
	ctr      testcontainers.Container
	restarts atomic.Int64
}

// restartablePorts is how many free host ports are tried, in case another
// process takes the one chosen before the container binds it.
const restartablePorts = 3

// restartStopTimeout is how long a graceful restart waits for the server
// to stop before Docker kills it.
const restartStopTimeout = 10

// RestartablePostgres starts a PostgreSQL server for tb alone, from the
// image IDEM_POSTGRES_IMAGE names (IDEM_POSTGRES_DSN is not used: a server
// given by DSN is not restarted). It skips tb, or fails it when
// IDEM_REQUIRE names postgres, if the image cannot be had; it fails tb if
// the server does not start.
func RestartablePostgres(tb testing.TB) *Restartable {
	tb.Helper()
	return startRestartable(tb, postgresServer, func(ctx context.Context, image string, more ...testcontainers.ContainerCustomizer) (testcontainers.Container, string, error) {
		return runPostgres(ctx, image, more...)
	}, "5432/tcp")
}

// RestartableMySQL starts a MySQL or MariaDB server for tb alone, from the
// image IDEM_MYSQL_IMAGE names (IDEM_MYSQL_DSN is not used). It skips tb,
// or fails it when IDEM_REQUIRE names mysql, if the image cannot be had;
// it fails tb if the server does not start.
func RestartableMySQL(tb testing.TB) *Restartable {
	tb.Helper()
	return startRestartable(tb, mysqlServer, func(ctx context.Context, image string, more ...testcontainers.ContainerCustomizer) (testcontainers.Container, string, error) {
		return runMySQL(ctx, image, more...)
	}, "3306/tcp")
}

type runFunc func(ctx context.Context, image string, more ...testcontainers.ContainerCustomizer) (testcontainers.Container, string, error)

func startRestartable(tb testing.TB, s *server, run runFunc, port string) *Restartable {
	tb.Helper()
	image := os.Getenv(s.imageEnv)
	if image == "" {
		image = s.defaultImage
	}
	if reason, _ := ensureImage(image); reason != "" {
		msg := fmt.Sprintf("restartable %s: %s.", s.title, reason)
		if required(s.name) {
			tb.Fatalf("%s\n%s names %s, so this is a failure.", msg, EnvRequire, s.name)
		}
		tb.Skipf("%s\nSet %s=%s to make this a failure.", msg, EnvRequire, s.name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	begin := time.Now()
	r := &Restartable{title: s.title}
	tb.Cleanup(func() {
		if err := removeAll([]testcontainers.Container{r.ctr}, nil); err != nil {
			tb.Errorf("remove the restartable %s: %v", s.title, err)
		}
	})
	var err error
	for try := 0; try < restartablePorts; try++ {
		var hostPort int
		if hostPort, err = freePort(); err != nil {
			break
		}
		var ctr testcontainers.Container
		ctr, r.DSN, err = run(ctx, image,
			testcontainers.WithLabels(labels(s.name+"-restartable")),
			testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
				hc.PortBindings = network.PortMap{network.MustParsePort(port): {{
					HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: strconv.Itoa(hostPort),
				}}}
			}))
		if ctr != nil && err != nil {
			err = withLog(err, ctr)
			_ = removeAll([]testcontainers.Container{ctr}, nil)
			ctr = nil
		}
		r.ctr = ctr
		if err == nil || !portTaken(err) {
			break
		}
	}
	if err != nil {
		tb.Fatalf("start a restartable %s from image %s (limit %s): %v", s.title, image, startTimeout, err)
	}
	tb.Logf("restartable %s from %s on %s ready in %.1fs", s.title, image, hostPortOf(r.DSN), time.Since(begin).Seconds())
	return r
}

// freePort returns a TCP port of 127.0.0.1 that nothing listened on a
// moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// hostPortOf is the "host:port" a DSN names, for messages.
func hostPortOf(dsn string) string {
	if i := strings.Index(dsn, "tcp("); i >= 0 {
		rest := dsn[i+4:]
		return rest[:strings.Index(rest, ")")]
	}
	return hostPort(dsn)
}

// Restart restarts the server's container and returns once Docker started
// it again; the server may not accept connections yet. Restarts take
// turns: the odd ones stop the server gracefully (the image's stop signal,
// SIGINT for PostgreSQL's fast shutdown, SIGTERM for MySQL; Docker kills
// it after ten seconds), the even ones kill it at once (SIGKILL), a crash
// the server recovers from at start. Either way its connections break and
// the transactions in flight roll back, or commit if their COMMIT was under
// way.
//
// Docker releases the fixed host port while the container is down; should
// another process bind it meanwhile, the start fails with "address already
// in use". Restart then tries to start the container again, a few times
// (restartStartTries), in case that process lets the port go; one that
// keeps it fails the restart.
func (r *Restartable) Restart(ctx context.Context) error {
	cli, err := docker(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = cli.Close() }()
	n := r.restarts.Add(1)
	timeout := restartStopTimeout
	opts := client.ContainerRestartOptions{Timeout: &timeout}
	if n%2 == 0 {
		opts.Signal, timeout = "SIGKILL", 0
	}
	id := r.ctr.GetContainerID()
	_, err = cli.ContainerRestart(ctx, id, opts)
	for try := 1; err != nil && portTaken(err) && try < restartStartTries; try++ {
		select {
		case <-ctx.Done():
			return fmt.Errorf("restart the %s container (restart %d): %w (then: %w)", r.title, n, err, ctx.Err())
		case <-time.After(restartStartPause):
		}
		_, err = cli.ContainerStart(ctx, id, client.ContainerStartOptions{})
	}
	if err != nil {
		return fmt.Errorf("restart the %s container (restart %d): %w", r.title, n, err)
	}
	return nil
}

// restartStartTries is how many times Restart starts the container while
// its host port is taken; restartStartPause is the pause between tries.
const (
	restartStartTries = 4
	restartStartPause = 500 * time.Millisecond
)

// portTaken says err is Docker's failure to bind a host port another
// process holds.
func portTaken(err error) bool {
	return strings.Contains(err.Error(), "address already in use")
}

// Restarts reports how many restarts were asked for.
func (r *Restartable) Restarts() int { return int(r.restarts.Load()) }
