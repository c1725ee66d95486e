package containers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tcexec "github.com/testcontainers/testcontainers-go/exec"
	"github.com/testcontainers/testcontainers-go/wait"
)

// Images of the PgBouncer stand-ins scripts/standin/build makes (targets
// pgbouncer:1.18 and pgbouncer:1.26). There is no official PgBouncer image;
// another image must follow the environment contract of
// scripts/standin/pgbouncer/docker-entrypoint.sh.
const (
	// EnvPgBouncerImages names the variable holding the two images to use
	// instead, old and new, comma-separated.
	EnvPgBouncerImages = "IDEM_PGBOUNCER_IMAGES"
	// DefaultPgBouncerOldImage is PgBouncer 1.18 (bookworm): no tracking
	// of prepared statements.
	DefaultPgBouncerOldImage = "idem-standin/pgbouncer:1.18"
	// DefaultPgBouncerNewImage is PgBouncer 1.26 (sid).
	DefaultPgBouncerNewImage = "idem-standin/pgbouncer:1.26"
)

// pgbouncerStartTimeout bounds starting the server and both poolers.
const pgbouncerStartTimeout = 3 * time.Minute

// PgBouncerMaxPreparedStatements is the max_prepared_statements of the new
// PgBouncer: how many prepared statements it tracks per server connection.
const PgBouncerMaxPreparedStatements = 200

// PgBouncerSetup is a PostgreSQL server (the image IDEM_POSTGRES_IMAGE names)
// with two PgBouncers in front of it in transaction pooling mode, on a
// network of their own: Old is PgBouncer 1.18, which does not know about
// prepared statements; New is PgBouncer 1.26 with max_prepared_statements
// set. Each serves the database idem twice: as idem, with a pool of 40
// server connections (as many as a test's pool has clients, so that
// waiters never starve a holder of the server connection it needs), and as
// idem_one, with one.
type PgBouncerSetup struct {
	// Server is the DSN of the PostgreSQL server itself.
	Server string
	// Old and New are the two poolers.
	Old, New *PgBouncer

	server testcontainers.Container
	nw     *dockerNetwork
}

// PgBouncer is one PgBouncer of a [PgBouncerSetup].
type PgBouncer struct {
	// Version is PgBouncer's version as the image reports it: "1.18.0".
	Version string
	// DSN is the pooler's DSN for the database idem:
	// postgres://idem:idem@localhost:PORT/idem?sslmode=disable. The port
	// is fixed, so it stays the same across Crash.
	DSN string

	ctr testcontainers.Container
}

// Crash kills the pooler (SIGKILL: every client and server connection
// through it breaks, transactions and COMMITs in flight included) and
// starts it again on the same port, returning once Docker started it (it
// may not accept connections yet). The server rolls back what the pooler's
// connections left open; a COMMIT under way may have committed.
func (b *PgBouncer) Crash(ctx context.Context) error {
	cli, err := docker(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = cli.Close() }()
	timeout := 0
	id := b.ctr.GetContainerID()
	_, err = cli.ContainerRestart(ctx, id, client.ContainerRestartOptions{Signal: "SIGKILL", Timeout: &timeout})
	for try := 1; err != nil && portTaken(err) && try < restartStartTries; try++ {
		select {
		case <-ctx.Done():
			return fmt.Errorf("crash PgBouncer %s: %w (then: %w)", b.Version, err, ctx.Err())
		case <-time.After(restartStartPause):
		}
		_, err = cli.ContainerStart(ctx, id, client.ContainerStartOptions{})
	}
	if err != nil {
		return fmt.Errorf("crash PgBouncer %s: %w", b.Version, err)
	}
	return nil
}

// Database is the pooler's DSN for another database name it serves:
// idem_one, or pgbouncer, its admin console (which speaks only the simple
// query protocol: add default_query_exec_mode=simple_protocol).
func (b *PgBouncer) Database(name string) string {
	return strings.Replace(b.DSN, "/"+pgDatabase+"?", "/"+name+"?", 1)
}

func (b *PgBouncer) dsn(ctx context.Context) (string, error) {
	port, err := b.ctr.MappedPort(ctx, "6432/tcp")
	if err != nil {
		return "", fmt.Errorf("mapped port: %w", err)
	}
	return fmt.Sprintf("postgres://%s:%s@%s/%s?sslmode=disable", pgUser, pgPassword, net.JoinHostPort("localhost", port.Port()), pgDatabase), nil
}

// pgbouncerShared is the setup this test binary shares.
var pgbouncerShared struct {
	mu          sync.Mutex
	started     bool
	terminated  bool
	set         *PgBouncerSetup
	unavailable string
	err         error
}

// PgBouncers returns the server and poolers this test binary shares,
// started on the first call (in a few seconds). It skips tb, or fails it
// when IDEM_REQUIRE names pgbouncer, if an image cannot be had; it fails tb
// if they do not start. [Terminate] removes them.
func PgBouncers(tb testing.TB) *PgBouncerSetup {
	tb.Helper()
	pgbouncerShared.mu.Lock()
	defer pgbouncerShared.mu.Unlock()
	if pgbouncerShared.terminated {
		tb.Fatal("containers.Terminate was already called in this test binary")
	}
	if !pgbouncerShared.started {
		pgbouncerShared.started = true
		launchPgBouncers()
	}
	switch {
	case pgbouncerShared.err != nil:
		tb.Fatal(pgbouncerShared.err)
	case pgbouncerShared.unavailable != "":
		msg := fmt.Sprintf("PgBouncer: %s.\nBuild the images with scripts/standin/build pgbouncer:1.18 pgbouncer:1.26 (./scripts/test does), or name others with %s.",
			pgbouncerShared.unavailable, EnvPgBouncerImages)
		if required("pgbouncer") {
			tb.Fatalf("%s\n%s names pgbouncer, so this is a failure.", msg, EnvRequire)
		}
		tb.Skipf("%s\nSet %s=pgbouncer to make this a failure.", msg, EnvRequire)
	}
	return pgbouncerShared.set
}

// launchPgBouncers starts the shared setup; pgbouncerShared.mu is held.
func launchPgBouncers() {
	images := []string{os.Getenv(EnvPostgresImage), DefaultPgBouncerOldImage, DefaultPgBouncerNewImage}
	if images[0] == "" {
		images[0] = DefaultPostgresImage
	}
	if v := os.Getenv(EnvPgBouncerImages); v != "" {
		old, nw, ok := strings.Cut(v, ",")
		if !ok {
			pgbouncerShared.err = fmt.Errorf("%s=%q: want two images, old and new, comma-separated", EnvPgBouncerImages, v)
			return
		}
		images[1], images[2] = old, nw
	}
	for _, image := range images {
		if reason, _ := ensureImage(image); reason != "" {
			pgbouncerShared.unavailable = reason
			return
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), pgbouncerStartTimeout)
	defer cancel()
	begin := time.Now()
	set := &PgBouncerSetup{}
	if err := set.start(ctx, images[0], images[1], images[2]); err != nil {
		if rerr := set.remove(); rerr != nil {
			err = fmt.Errorf("%w\nremoving them also failed: %v", err, rerr)
		}
		pgbouncerShared.err = fmt.Errorf("start PostgreSQL and PgBouncer from %s (limit %s): %w", strings.Join(images, ", "), pgbouncerStartTimeout, err)
		return
	}
	pgbouncerShared.set = set
	fmt.Fprintf(os.Stderr, "containers: PostgreSQL behind PgBouncer %s and %s ready in %.1fs\n",
		set.Old.Version, set.New.Version, time.Since(begin).Seconds())
}

func (s *PgBouncerSetup) start(ctx context.Context, serverImage, oldImage, newImage string) error {
	nets, err := newNetworks(ctx, "pgbouncer", "net")
	if len(nets) > 0 {
		s.nw = nets[0]
	}
	if err != nil {
		return err
	}
	s.server, err = testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{
		ContainerRequest: testcontainers.ContainerRequest{
			Image:          serverImage,
			Env:            map[string]string{"POSTGRES_USER": pgUser, "POSTGRES_PASSWORD": pgPassword, "POSTGRES_DB": pgDatabase},
			Cmd:            []string{"-c", "max_connections=200", "-c", "fsync=off"},
			ExposedPorts:   []string{"5432/tcp"},
			Networks:       []string{s.nw.Name},
			NetworkAliases: map[string][]string{s.nw.Name: {"postgres"}},
			Labels:         labels("pgbouncer"),
			WaitingFor: wait.ForAll(
				wait.ForLog("database system is ready to accept connections").WithOccurrence(2).WithStartupTimeout(pgbouncerStartTimeout),
				wait.ForListeningPort("5432/tcp").WithStartupTimeout(pgbouncerStartTimeout),
			).WithDeadline(pgbouncerStartTimeout),
		},
		Started: true,
	})
	if err != nil {
		return withLog(fmt.Errorf("PostgreSQL: %w", err), s.server)
	}
	if s.Server, err = postgresDSN(ctx, s.server); err != nil {
		return err
	}
	var errs [2]error
	var wg sync.WaitGroup
	s.Old, s.New = &PgBouncer{}, &PgBouncer{}
	wg.Go(func() { errs[0] = s.startPooler(ctx, s.Old, oldImage, "") })
	wg.Go(func() { errs[1] = s.startPooler(ctx, s.New, newImage, fmt.Sprint(PgBouncerMaxPreparedStatements)) })
	wg.Wait()
	return errors.Join(errs[:]...)
}

// startPooler starts b in front of the server, tracking maxPrepared
// prepared statements per server connection when it is not empty.
func (s *PgBouncerSetup) startPooler(ctx context.Context, b *PgBouncer, image, maxPrepared string) error {
	env := map[string]string{
		"PGBOUNCER_BACKEND":   "postgres:5432",
		"PGBOUNCER_USER":      pgUser,
		"PGBOUNCER_PASSWORD":  pgPassword,
		"PGBOUNCER_POOL_SIZE": "40",
		"PGBOUNCER_DATABASES": "idem_one = host=postgres port=5432 dbname=" + pgDatabase + " pool_size=1",
	}
	if maxPrepared != "" {
		env["PGBOUNCER_MAX_PREPARED_STATEMENTS"] = maxPrepared
	}
	// A fixed host port, so that Crash brings the pooler back where its
	// clients look for it; tried again if another process took it.
	var err error
	for try := 0; try < restartablePorts; try++ {
		var hostPort int
		if hostPort, err = freePort(); err != nil {
			return err
		}
		b.ctr, err = testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{
			ContainerRequest: testcontainers.ContainerRequest{
				Image:        image,
				Env:          env,
				ExposedPorts: []string{"6432/tcp"},
				Networks:     []string{s.nw.Name},
				Labels:       labels("pgbouncer"),
				HostConfigModifier: func(hc *container.HostConfig) {
					hc.PortBindings = network.PortMap{network.MustParsePort("6432/tcp"): {{
						HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: strconv.Itoa(hostPort),
					}}}
				},
				WaitingFor: wait.ForListeningPort("6432/tcp").WithStartupTimeout(pgbouncerStartTimeout),
			},
			Started: true,
		})
		if err == nil || !portTaken(err) {
			break
		}
		if b.ctr != nil {
			_ = removeAll([]testcontainers.Container{b.ctr}, nil)
			b.ctr = nil
		}
	}
	if err != nil {
		return withLog(fmt.Errorf("PgBouncer from %s: %w", image, err), b.ctr)
	}
	code, out, err := b.ctr.Exec(ctx, []string{"pgbouncer", "--version"}, tcexec.Multiplexed())
	if err != nil || code != 0 {
		return fmt.Errorf("pgbouncer --version in %s: exit code %d, %v", image, code, err)
	}
	version, _ := io.ReadAll(out)
	first, _, _ := strings.Cut(strings.TrimSpace(string(version)), "\n")
	if f := strings.Fields(first); len(f) >= 2 {
		b.Version = f[1]
	}
	b.DSN, err = b.dsn(ctx)
	return err
}

// remove removes the poolers, the server and their network.
func (s *PgBouncerSetup) remove() error {
	var ctrs []testcontainers.Container
	for _, b := range []*PgBouncer{s.Old, s.New} {
		if b != nil {
			ctrs = append(ctrs, b.ctr)
		}
	}
	return removeAll(append(ctrs, s.server), []*dockerNetwork{s.nw})
}

// terminatePgBouncers removes the shared setup, if one was started.
func terminatePgBouncers() error {
	pgbouncerShared.mu.Lock()
	defer pgbouncerShared.mu.Unlock()
	pgbouncerShared.terminated = true
	s := pgbouncerShared.set
	pgbouncerShared.set = nil
	if s == nil {
		return nil
	}
	if err := s.remove(); err != nil {
		return fmt.Errorf("PgBouncer: %w", err)
	}
	return nil
}
