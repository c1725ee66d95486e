package containers

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // driver "pgx" for status queries
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tcexec "github.com/testcontainers/testcontainers-go/exec"
	"github.com/testcontainers/testcontainers-go/wait"
)

// replicationStartTimeout bounds starting a primary and its standby.
const replicationStartTimeout = 3 * time.Minute

// ReplicationOptions say how a [PostgresReplication] replicates.
type ReplicationOptions struct {
	// Synchronous makes the primary wait, at every COMMIT, until the
	// standby has flushed the transaction's WAL (synchronous_standby_names
	// = '*', synchronous_commit = on): a commit the primary acknowledged
	// survives the standby's promotion. Otherwise replication is
	// asynchronous, and the last acknowledged commits may be lost with the
	// primary.
	Synchronous bool
}

// PostgresReplication is a PostgreSQL primary with one streaming standby
// (a physical replica made by pg_basebackup), on a network of their own,
// from the image IDEM_POSTGRES_IMAGE names. A test can kill the primary and
// promote the standby.
type PostgresReplication struct {
	// Primary and Standby are the single-host DSNs of the two servers:
	// postgres://idem:idem@localhost:PORT/idem?sslmode=disable.
	Primary, Standby string
	// MultiHost is a DSN naming both servers, primary first, with
	// target_session_attrs=read-write: a new connection goes to whichever
	// accepts writes, so after a promotion it finds the new primary.
	MultiHost string

	primary, standby testcontainers.Container
	receiverPID      int // the standby's WAL receiver, once StopStandbyReceiver stopped it
	nw               *dockerNetwork
}

// StartPostgresReplication starts a primary and a streaming standby for tb
// and removes both (and their network) when tb ends. It skips tb, or fails
// it when IDEM_REQUIRE names postgres, if the image cannot be had; it fails
// tb if the servers do not start, or if the standby does not stream within
// the start bound.
func StartPostgresReplication(tb testing.TB, opts ReplicationOptions) *PostgresReplication {
	tb.Helper()
	image := os.Getenv(EnvPostgresImage)
	if image == "" {
		image = DefaultPostgresImage
	}
	if reason, _ := ensureImage(image); reason != "" {
		msg := fmt.Sprintf("PostgreSQL replication: %s.", reason)
		if required("postgres") {
			tb.Fatalf("%s\n%s names postgres, so this is a failure.", msg, EnvRequire)
		}
		tb.Skipf("%s\nSet %s=postgres to make this a failure.", msg, EnvRequire)
	}
	ctx, cancel := context.WithTimeout(context.Background(), replicationStartTimeout)
	defer cancel()
	begin := time.Now()
	r := &PostgresReplication{}
	tb.Cleanup(func() {
		if err := removeAll([]testcontainers.Container{r.standby, r.primary}, []*dockerNetwork{r.nw}); err != nil {
			tb.Errorf("remove PostgreSQL replication: %v", err)
		}
	})
	if err := r.start(ctx, image, opts); err != nil {
		tb.Fatalf("start PostgreSQL primary and standby from image %s (limit %s): %v", image, replicationStartTimeout, err)
	}
	tb.Logf("PostgreSQL primary and standby (synchronous: %v) from %s streaming in %.1fs", opts.Synchronous, image, time.Since(begin).Seconds())
	return r
}

// replicationHBA lets the standby connect for replication: the images'
// pg_hba.conf lets every user reach every database, but "all" does not
// cover replication connections.
const replicationHBA = `#!/bin/sh
set -e
echo "host replication all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
`

// standbyScript makes the standby: a base backup of the primary that
// writes the recovery settings (-R), retried for a bounded time, then the
// server, as a hot standby.
const standbyScript = `set -u
mkdir -p "$PGDATA" && chmod 700 "$PGDATA"
for i in $(seq 1 60); do
	if pg_basebackup -h primary -p 5432 -U idem -D "$PGDATA" -X stream -R -w -c fast; then
		exec postgres -c max_connections=200 -c hot_standby=on
	fi
	rm -rf "$PGDATA"/*
	sleep 1
done
echo "pg_basebackup did not succeed in 60 attempts" >&2
exit 1
`

func (r *PostgresReplication) start(ctx context.Context, image string, opts ReplicationOptions) error {
	nets, err := newNetworks(ctx, "postgres-replication", "net")
	if len(nets) > 0 {
		r.nw = nets[0]
	}
	if err != nil {
		return err
	}
	// The settings given on the command line stay the primary's: the base
	// backup copies configuration files only. A promoted standby must not
	// wait for a standby of its own.
	args := []string{"-c", "max_connections=200", "-c", "wal_level=replica", "-c", "max_wal_senders=5", "-c", "wal_keep_size=256MB"}
	if opts.Synchronous {
		args = append(args, "-c", "synchronous_standby_names=*", "-c", "synchronous_commit=on")
	}
	// The primary's entrypoint runs a temporary server without TCP first,
	// which logs the ready line too; the port opens only for the real one.
	// A standby logs "ready to accept read-only connections".
	ready := func() wait.Strategy {
		return wait.ForAll(
			wait.ForLog("database system is ready to accept").WithStartupTimeout(replicationStartTimeout),
			wait.ForListeningPort("5432/tcp").WithStartupTimeout(replicationStartTimeout),
		).WithDeadline(replicationStartTimeout)
	}
	r.primary, err = testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{
		ContainerRequest: testcontainers.ContainerRequest{
			Image:          image,
			Env:            map[string]string{"POSTGRES_USER": pgUser, "POSTGRES_PASSWORD": pgPassword, "POSTGRES_DB": pgDatabase},
			Cmd:            args,
			ExposedPorts:   []string{"5432/tcp"},
			Networks:       []string{r.nw.Name},
			NetworkAliases: map[string][]string{r.nw.Name: {"primary"}},
			Labels:         labels("postgres-replication"),
			Files: []testcontainers.ContainerFile{{
				Reader:            strings.NewReader(replicationHBA),
				ContainerFilePath: "/docker-entrypoint-initdb.d/10-replication.sh",
				FileMode:          0o755,
			}},
			WaitingFor: ready(),
		},
		Started: true,
	})
	if err != nil {
		return withLog(fmt.Errorf("primary: %w", err), r.primary)
	}
	if r.Primary, err = postgresDSN(ctx, r.primary); err != nil {
		return err
	}

	r.standby, err = testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{
		ContainerRequest: testcontainers.ContainerRequest{
			Image: image,
			// The official image runs commands other than postgres as
			// root; the stand-in as postgres already.
			User:         "postgres",
			Env:          map[string]string{"PGPASSWORD": pgPassword},
			Cmd:          []string{"bash", "-c", standbyScript},
			ExposedPorts: []string{"5432/tcp"},
			Networks:     []string{r.nw.Name},
			Labels:       labels("postgres-replication"),
			WaitingFor:   ready(),
		},
		Started: true,
	})
	if err != nil {
		return withLog(fmt.Errorf("standby: %w", err), r.standby)
	}
	if r.Standby, err = postgresDSN(ctx, r.standby); err != nil {
		return err
	}
	r.MultiHost = strings.Replace(r.Primary, "@"+hostPort(r.Primary), "@"+hostPort(r.Primary)+","+hostPort(r.Standby), 1) +
		"&target_session_attrs=read-write"
	return r.waitStreaming(ctx, opts.Synchronous)
}

// withLog adds the last lines of ctr's log to err.
func withLog(err error, ctr testcontainers.Container) error {
	if ctr == nil {
		return err
	}
	if tail := logTail(ctr); tail != "" {
		return fmt.Errorf("%w\nlast lines of the log:\n%s", err, tail)
	}
	return err
}

// postgresDSN is the DSN of ctr's mapped port.
func postgresDSN(ctx context.Context, ctr testcontainers.Container) (string, error) {
	port, err := ctr.MappedPort(ctx, "5432/tcp")
	if err != nil {
		return "", fmt.Errorf("mapped port: %w", err)
	}
	return fmt.Sprintf("postgres://%s:%s@%s/%s?sslmode=disable", pgUser, pgPassword, net.JoinHostPort("localhost", port.Port()), pgDatabase), nil
}

// hostPort is the host:port of a single-host postgres:// DSN.
func hostPort(dsn string) string {
	rest := dsn[strings.LastIndex(dsn, "@")+1:]
	return rest[:strings.Index(rest, "/")]
}

// waitStreaming waits until the primary reports the standby streaming (and
// synchronous, when asked), polling every 250 ms.
func (r *PostgresReplication) waitStreaming(ctx context.Context, synchronous bool) error {
	db, err := sql.Open("pgx", r.Primary+"&connect_timeout=5")
	if err != nil {
		return err
	}
	defer db.Close()
	want := "async"
	if synchronous {
		want = "sync"
	}
	var lastErr error
	for {
		var n int
		lastErr = db.QueryRowContext(ctx, "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming' AND sync_state = $1", want).Scan(&n)
		if lastErr == nil && n == 1 {
			return nil
		}
		select {
		case <-ctx.Done():
			return withLog(fmt.Errorf("the standby is not streaming (%s) after the start bound: %w (last error %v)", want, ctx.Err(), lastErr), r.standby)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// KillPrimary kills the primary's server at once (SIGKILL): no shutdown, no
// last WAL sent. Its connections break, and its mapped port closes.
func (r *PostgresReplication) KillPrimary(ctx context.Context) error {
	return r.signal(ctx, r.primary, "KILL")
}

// StopStandbyReceiver stops the standby's WAL receiver (SIGSTOP): the
// standby flushes and acknowledges nothing until ContinueStandbyReceiver.
// With synchronous replication every COMMIT on the primary waits meanwhile.
//
// It stops the one process that acknowledges rather than pausing the whole
// container: docker pause uses the cgroup freezer, which failed once in CI
// ("unable to freeze") on an engine with cgroup v1 and fuse-overlayfs. A
// signal is always delivered.
func (r *PostgresReplication) StopStandbyReceiver(ctx context.Context) error {
	pid, err := r.standbyReceiverPID(ctx)
	if err != nil {
		return err
	}
	r.receiverPID = pid
	return r.execStandby(ctx, fmt.Sprintf("kill -STOP %d", pid))
}

// ContinueStandbyReceiver lets the WAL receiver that StopStandbyReceiver
// stopped run again (SIGCONT).
func (r *PostgresReplication) ContinueStandbyReceiver(ctx context.Context) error {
	if r.receiverPID == 0 {
		return errors.New("continue the standby's WAL receiver: StopStandbyReceiver stopped none")
	}
	return r.execStandby(ctx, fmt.Sprintf("kill -CONT %d", r.receiverPID))
}

// standbyReceiverPID is the process id, inside the standby's container, of
// its WAL receiver.
func (r *PostgresReplication) standbyReceiverPID(ctx context.Context) (int, error) {
	db, err := sql.Open("pgx", r.Standby+"&connect_timeout=5")
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var pid sql.NullInt64
	if err := db.QueryRowContext(ctx, "SELECT pid FROM pg_stat_wal_receiver").Scan(&pid); err != nil {
		return 0, fmt.Errorf("the standby's WAL receiver: %w", err)
	}
	if !pid.Valid || pid.Int64 <= 0 {
		return 0, errors.New("the standby has no WAL receiver")
	}
	return int(pid.Int64), nil
}

// execStandby runs a shell command in the standby's container, as the
// user that runs its server (the container is started as postgres), and
// fails unless it exits 0.
func (r *PostgresReplication) execStandby(ctx context.Context, command string) error {
	code, out, err := r.standby.Exec(ctx, []string{"sh", "-c", command}, tcexec.Multiplexed())
	if err != nil {
		return fmt.Errorf("%s on the standby: %w", command, err)
	}
	if code != 0 {
		msg, _ := io.ReadAll(out)
		return fmt.Errorf("%s on the standby: exit code %d: %s", command, code, strings.TrimSpace(string(msg)))
	}
	return nil
}

// Promote makes the standby a primary (pg_promote) and waits, within ctx,
// until it accepts writes.
func (r *PostgresReplication) Promote(ctx context.Context) error {
	db, err := sql.Open("pgx", r.Standby+"&connect_timeout=5")
	if err != nil {
		return err
	}
	defer db.Close()
	var ok bool
	if err := db.QueryRowContext(ctx, "SELECT pg_promote(true, 60)").Scan(&ok); err != nil {
		return fmt.Errorf("promote the standby: %w", err)
	}
	if !ok {
		return fmt.Errorf("promote the standby: pg_promote reported failure")
	}
	return nil
}

func (r *PostgresReplication) signal(ctx context.Context, ctr testcontainers.Container, sig string) error {
	cli, err := docker(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = cli.Close() }()
	_, err = cli.ContainerKill(ctx, ctr.GetContainerID(), client.ContainerKillOptions{Signal: sig})
	return err
}
