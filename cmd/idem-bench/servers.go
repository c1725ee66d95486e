package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"

	"github.com/moby/moby/api/types/network"
	"github.com/testcontainers/testcontainers-go"
	tcmysql "github.com/testcontainers/testcontainers-go/modules/mysql"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
	"github.com/testcontainers/testcontainers-go/wait"
)

// The database servers come from DSNs in the environment, or from containers
// this command starts and removes: the same variables as the conformance
// suite's containers (which need a testing.TB, so they are not reused here).
const (
	envPostgresDSN   = "IDEM_POSTGRES_DSN"
	envPostgresImage = "IDEM_POSTGRES_IMAGE"
	envMySQLDSN      = "IDEM_MYSQL_DSN"
	envMySQLImage    = "IDEM_MYSQL_IMAGE"
	envNATSURL       = "IDEM_NATS_URL"
	envNATSImage     = "IDEM_NATS_IMAGE"

	defaultPostgresImage = "postgres:17"
	defaultMySQLImage    = "mysql:8.4"
	defaultNATSImage     = "nats:2.10"

	containerLabel = "org.idemkit.idem.bench"
	startTimeout   = 3 * time.Minute
)

// servers are the database servers of a run, each with its delaying proxy,
// started on first use and removed at the end of the run.
type servers struct {
	netRTT       time.Duration
	mysqlParams  string
	pg, my, nats *server
}

// server is a database the benchmark runs against.
type server struct {
	family string // "postgres", "mysql"
	dsn    string
	image  string // "" for a DSN from the environment
	ctr    testcontainers.Container
	volume string
	// via is the delaying proxy in front of the server, started on first
	// use; calibrated is set once its delay is.
	via        *delayProxy
	calibrated bool
}

// server returns the server of family, started on first use.
func (s *servers) server(ctx context.Context, family string) (*server, error) {
	slot := map[string]**server{"postgres": &s.pg, "mysql": &s.my, "nats": &s.nats}[family]
	if *slot == nil {
		logf("starting %s", family)
		srv, err := start(ctx, family)
		*slot = srv // a container that failed to start is removed too
		if err != nil {
			return nil, err
		}
		srv.family = family
	}
	return *slot, nil
}

// proxy returns the delaying proxy to s, started on first use.
func (s *server) proxy(conns int) (*delayProxy, error) {
	if s.via != nil {
		return s.via, nil
	}
	var addr string
	if s.family == "mysql" {
		cfg, err := mysqldriver.ParseDSN(s.dsn)
		if err != nil {
			return nil, err
		}
		addr = cfg.Addr
	} else {
		cc, err := pgx.ParseConfig(s.dsn)
		if err != nil {
			return nil, err
		}
		addr = net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port)))
	}
	p, err := startDelayProxy(addr, 0, 4*conns)
	s.via = p
	return p, err
}

func (s *servers) close() error {
	var errs []error
	for _, srv := range []*server{s.pg, s.my, s.nats} {
		if srv != nil && srv.via != nil {
			errs = append(errs, srv.via.Close())
		}
		errs = append(errs, srv.terminate())
	}
	return errors.Join(errs...)
}

// newTarget connects backend b (a -backends value).
func (s *servers) newTarget(ctx context.Context, b string, conns int) (*target, error) {
	base, delayed := strings.CutSuffix(b, "+delay")
	prefix := "bench_" + strings.ReplaceAll(base, "-", "_")
	if delayed {
		prefix += "_delay"
	}
	if base == "sqlite" {
		dir, err := os.MkdirTemp("", "idem-bench-")
		if err != nil {
			return nil, err
		}
		return newSQLiteTarget(dir, 4)
	}
	family := "postgres"
	if strings.HasPrefix(base, "mysql") {
		family = "mysql"
	}
	srv, err := s.server(ctx, family)
	if err != nil {
		return nil, err
	}
	var via *delayProxy
	if delayed {
		if via, err = srv.proxy(conns); err != nil {
			return nil, err
		}
	}
	var t *target
	switch base {
	case "pgx":
		t, err = newPgxTarget(srv.dsn, prefix, conns, via)
	case "pgsql", "pgsql-lazy":
		t, err = newPgSQLTarget(srv.dsn, prefix, conns, via, base == "pgsql-lazy")
	default:
		params := s.mysqlParams
		if base == "mysql-ip" {
			params = strings.TrimPrefix(params+"&interpolateParams=true", "&")
		}
		t, err = newMySQLTarget(srv.dsn, params, prefix, conns, via)
	}
	if err != nil {
		return nil, err
	}
	t.server += "; " + srv.describe()
	t.serverCPU = srv.cpu()
	if delayed {
		t.name += " +delay"
		if !srv.calibrated {
			// Once per proxy: the first target through it sets the delay.
			got, err := via.calibrate(s.netRTT, func() (time.Duration, error) { return pingRoundTrip(ctx, t.ping) })
			if err != nil {
				t.close()
				return nil, fmt.Errorf("calibrate the delaying proxy: %w", err)
			}
			logf("%s: the proxy delays each way by %v: a round trip takes %.2f ms", t.name, via.Delay().Round(time.Microsecond), ms(got))
			srv.calibrated = true
		}
		t.server += fmt.Sprintf("; through a delaying proxy on loopback, +%v each way (set to make a round trip %v)", via.Delay().Round(time.Microsecond), s.netRTT)
	}
	if rt, err := pingRoundTrip(ctx, t.ping); err == nil {
		t.server += fmt.Sprintf("; one round trip (SELECT 1, median of 50): %.2f ms", ms(rt))
	}
	return t, nil
}

// cpu reads the container's CPU time, or is nil.
func (s *server) cpu() func() time.Duration {
	if s == nil || s.ctr == nil {
		return nil
	}
	return cgroupCPU(s.ctr.GetContainerID())
}

func (s *server) describe() string {
	if s.image == "" {
		return "DSN from the environment"
	}
	return fmt.Sprintf("container %s, data on a Docker volume", s.image)
}

func (s *server) terminate() error {
	if s == nil || s.ctr == nil {
		return nil
	}
	err := testcontainers.TerminateContainer(s.ctr, testcontainers.StopTimeout(10*time.Second), testcontainers.RemoveVolumes(s.volume))
	s.ctr = nil
	return err
}

// start starts a server of family: PostgreSQL with durable commits (the
// testcontainers module turns fsync off by default; the benchmark measures
// with it on), MySQL or MariaDB with its default durability
// (innodb_flush_log_at_trx_commit=1); or returns the one its DSN variable
// names; or NATS with JetStream, stored on a volume too.
func start(ctx context.Context, family string) (*server, error) {
	envDSN, envImage, image, data := envPostgresDSN, envPostgresImage, defaultPostgresImage, "/var/lib/postgresql/data"
	switch family {
	case "mysql":
		envDSN, envImage, image, data = envMySQLDSN, envMySQLImage, defaultMySQLImage, "/var/lib/mysql"
	case "nats":
		envDSN, envImage, image, data = envNATSURL, envNATSImage, defaultNATSImage, "/data"
	}
	if dsn := os.Getenv(envDSN); dsn != "" {
		return &server{dsn: dsn}, nil
	}
	if v := os.Getenv(envImage); v != "" {
		image = v
	}
	s := &server{image: image, volume: fmt.Sprintf("idem-bench-%s-%d", family, os.Getpid())}
	opts := []testcontainers.ContainerCustomizer{
		testcontainers.WithLabels(map[string]string{containerLabel: family, "org.idemkit.idem.pid": strconv.Itoa(os.Getpid())}),
		testcontainers.WithMounts(testcontainers.VolumeMount(s.volume, testcontainers.ContainerMountTarget(data))),
	}
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	var ctr interface {
		testcontainers.Container
		ConnectionString(ctx context.Context, args ...string) (string, error)
	}
	var err error
	if family == "nats" {
		broker, err := testcontainers.Run(ctx, s.image, append(opts, testcontainers.WithExposedPorts("4222/tcp", "8222/tcp"),
			testcontainers.WithCmd("-js", "-sd", data, "-m", "8222"), testcontainers.WithWaitStrategyAndDeadline(startTimeout,
				wait.ForHTTP("/healthz?js-enabled-only=true").WithPort("8222/tcp").WithPollInterval(200*time.Millisecond)))...)
		if s.ctr = broker; err == nil {
			s.dsn, err = broker.PortEndpoint(ctx, "4222/tcp", "nats")
		}
		return s, err
	}
	if family == "postgres" {
		ctr, err = tcpostgres.Run(ctx, s.image, append(opts,
			tcpostgres.WithDatabase("idem"), tcpostgres.WithUsername("idem"), tcpostgres.WithPassword("idem"),
			tcpostgres.BasicWaitStrategies(),
			testcontainers.WithCmd("postgres", "-c", "fsync=on", "-c", "synchronous_commit=on", "-c", "max_connections=200",
				"-c", "shared_buffers=1GB"))...)
	} else {
		pingDSN := func(host string, port network.Port) string {
			return fmt.Sprintf("root:idem@tcp(%s)/idem", net.JoinHostPort(host, port.Port()))
		}
		ctr, err = tcmysql.Run(ctx, s.image, append(opts,
			tcmysql.WithUsername("root"), tcmysql.WithPassword("idem"), tcmysql.WithDatabase("idem"),
			testcontainers.WithCmd("--max-connections=500", "--innodb-buffer-pool-size=1G"),
			testcontainers.WithWaitStrategyAndDeadline(startTimeout,
				wait.ForListeningPort("3306/tcp").WithStartupTimeout(startTimeout),
				wait.ForSQL("3306/tcp", "mysql", pingDSN).WithStartupTimeout(startTimeout).WithPollInterval(250*time.Millisecond),
			))...)
	}
	s.ctr = ctr // a container that failed to start is removed too
	if err != nil {
		return s, fmt.Errorf("start %s: %w", s.image, err)
	}
	if family == "postgres" {
		s.dsn, err = ctr.ConnectionString(ctx, "sslmode=disable")
	} else {
		s.dsn, err = ctr.ConnectionString(ctx)
	}
	return s, err
}
