package containers

import (
	"context"
	"fmt"
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
