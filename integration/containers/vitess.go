package containers

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// Environment variables of the Vitess server.
const (
	// EnvVitessDSN names a vtgate to use instead of a container
	// (go-sql-driver/mysql form, no parameters): its default keyspace must
	// be VitessKeyspace's equal, sharded in two (-80, 80-), beside an
	// unsharded VitessUnsharded, and its users allowed to run ALTER
	// VSCHEMA.
	EnvVitessDSN = "IDEM_VITESS_DSN"
	// EnvVitessImage names the vttestserver image (default
	// DefaultVitessImage); it must follow the contract of the official
	// vitess/vttestserver image, as scripts/standin/vitess does.
	EnvVitessImage = "IDEM_VITESS_IMAGE"
)

// DefaultVitessImage is the official vttestserver image of the Vitess
// release the stand-in is built from (24.0.4, MySQL 8.4).
const DefaultVitessImage = "vitess/vttestserver:v24.0.4-mysql84"

// VitessKeyspace is the keyspace of the server [Vitess] starts, sharded in
// two (-80 and 80-). Its VSchema is {"sharded": true} at start: tables get
// their vindexes through ALTER VSCHEMA, which every user may run.
const VitessKeyspace = "idem"

// VitessUnsharded is the server's second keyspace, of one shard: tables
// there need no VSchema.
const VitessUnsharded = "solo"

// vitessPort is the base port inside the container (the image's PORT);
// vtgate's MySQL protocol port is three above it.
const vitessPort = 33574

var vitessServer = &server{
	name:         "vitess",
	title:        "Vitess",
	dsnEnv:       EnvVitessDSN,
	imageEnv:     EnvVitessImage,
	defaultImage: DefaultVitessImage,
	standin:      "idem-standin/vitess:0.24",
	start:        startVitess,
}

// Vitess returns the DSN of a vtgate for tb: IDEM_VITESS_DSN when set, else
// that of the vttestserver container this test binary shares, started on the
// first call, in the form
//
//	root@tcp(localhost:PORT)/idem
//
// Its keyspace idem has two shards, each a database of one mysqld, behind
// one vtgate (vttestserver runs them in one process, vtcombo). It skips tb,
// or fails it when IDEM_REQUIRE names vitess, if no server can be had; it
// fails tb if the container does not start. It is safe for concurrent use.
func Vitess(tb testing.TB) string {
	tb.Helper()
	return vitessServer.dsnFor(tb)
}

// vitessDSN is the DSN of vtgate at host:port, keyspace VitessKeyspace.
func vitessDSN(host, port string) string {
	return fmt.Sprintf("root@tcp(%s)/%s", net.JoinHostPort(host, port), VitessKeyspace)
}

// VitessIn returns the DSN of [Vitess]'s vtgate with database, a keyspace
// (VitessUnsharded) or a shard as a target ("idem:-80": statements go to
// that shard as they are).
func VitessIn(tb testing.TB, database string) string {
	tb.Helper()
	return strings.TrimSuffix(Vitess(tb), "/"+VitessKeyspace) + "/" + database
}

func startVitess(ctx context.Context, image string) (testcontainers.Container, string, error) {
	gate := fmt.Sprintf("%d/tcp", vitessPort+3)
	loopback := []network.PortBinding{{HostIP: netip.MustParseAddr("127.0.0.1")}}
	dsnFor := func(host string, port network.Port) string { return vitessDSN(host, port.Port()) }
	ctr, err := testcontainers.Run(ctx, image,
		testcontainers.WithEnv(map[string]string{
			"PORT":            fmt.Sprint(vitessPort),
			"KEYSPACES":       VitessKeyspace + "," + VitessUnsharded,
			"NUM_SHARDS":      "2,1",
			"MYSQL_BIND_HOST": "0.0.0.0",
		}),
		testcontainers.WithExposedPorts(gate),
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
			hc.PortBindings = network.PortMap{network.MustParsePort(gate): loopback}
		}),
		// vttestserver initialises a mysqld per shard, then starts vtcombo;
		// vtgate answers once every tablet serves.
		testcontainers.WithWaitStrategyAndDeadline(startTimeout,
			wait.ForListeningPort(gate).WithStartupTimeout(startTimeout),
			wait.ForSQL(gate, "mysql", dsnFor).
				WithQuery("SELECT COUNT(*) FROM dual").
				WithStartupTimeout(startTimeout).WithPollInterval(500*time.Millisecond),
		),
		testcontainers.WithLabels(labels("vitess")),
	)
	if err != nil {
		if ctr == nil {
			return nil, "", err
		}
		return ctr, "", err
	}
	host, port, err := endpoint(ctx, ctr, gate)
	if err != nil {
		return ctr, "", err
	}
	return ctr, vitessDSN(host, port), nil
}

// DiagnoseVitess writes to w what each shard's MySQL behind [Vitess]'s
// vtgate is doing, when this test binary started the container: the
// statements that are not idle, longest first, and the table metadata
// locks held or waited for. integration/vitess calls it after a failed run
// (MainDiagnosing): a case that stalled for minutes behind vtgate leaves
// its cause there (a DDL waiting for a metadata lock, say).
func DiagnoseVitess(w io.Writer) {
	vitessServer.mu.Lock()
	dsn := vitessServer.dsn
	vitessServer.mu.Unlock()
	if dsn == "" {
		return
	}
	queries := []string{
		"SELECT id, user, db, command, time, state, LEFT(info, 300) FROM information_schema.processlist " +
			"WHERE command <> 'Sleep' ORDER BY time DESC",
		"SELECT object_schema, object_name, lock_type, lock_status, owner_thread_id FROM performance_schema.metadata_locks " +
			"WHERE object_type = 'TABLE' ORDER BY lock_status, object_name",
	}
	for _, target := range []string{VitessKeyspace + ":-80", VitessKeyspace + ":80-", VitessUnsharded} {
		fmt.Fprintf(w, "containers: Vitess diagnostics, %s:\n", target)
		db, err := sql.Open("mysql", strings.TrimSuffix(dsn, "/"+VitessKeyspace)+"/"+target)
		if err != nil {
			fmt.Fprintf(w, "  open: %v\n", err)
			continue
		}
		for _, q := range queries {
			fmt.Fprintf(w, "  %s\n", q)
			if err := printRows(w, db, q); err != nil {
				fmt.Fprintf(w, "  error: %v\n", err)
			}
		}
		_ = db.Close()
	}
}

// printRows writes the rows of query on db to w, one line each, within
// ten seconds.
func printRows(w io.Writer, db *sql.DB, query string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := db.QueryContext(ctx, query)
	if err != nil {
		return err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return err
	}
	values := make([]sql.NullString, len(cols))
	dest := make([]any, len(cols))
	for i := range values {
		dest[i] = &values[i]
	}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		fields := make([]string, len(values))
		for i, v := range values {
			fields[i] = cols[i] + "=" + v.String
		}
		fmt.Fprintf(w, "    %s\n", strings.Join(fields, " "))
	}
	return rows.Err()
}
