// Package containers provides the database servers that idem's dialect tests
// and conformance suite run against, and the NATS broker of the queue
// consumer tests.
//
// [Postgres] and [MySQL] each return a DSN, [NATS] a URL (see its
// documentation: it is required wherever Docker works). A DSN given in the environment
// (IDEM_POSTGRES_DSN, IDEM_MYSQL_DSN) is used as is. Otherwise the first call
// in a test binary starts one container with testcontainers-go, from the
// image named by IDEM_POSTGRES_IMAGE (default postgres:17) or
// IDEM_MYSQL_IMAGE (default mysql:8.4), and every later call, from any test
// and any goroutine, gets the same server. On a machine without an image
// registry, scripts/standin/build makes local stand-in images
// (idem-standin/postgres:15, idem-standin/mariadb:10.11) and scripts/test
// selects them.
//
// When a backend cannot be had (no DSN and no usable Docker engine, or the
// image is neither present nor pullable) the test is skipped, unless
// IDEM_REQUIRE names the backend (a comma-separated list such as
// "postgres,mysql,nats,galera", or "all"): then it fails. A container that was found
// but did not start fails the test either way.
//
// Since the containers outlive single tests, a package that uses them calls
// [Terminate] after its tests have run, usually through [Main]:
//
//	func TestMain(m *testing.M) { containers.Main(m) }
//
// Clusters: [Galera] starts a three-node MariaDB Galera cluster, shared by
// the test binary like the servers above; [StartPostgresReplication] starts
// a PostgreSQL primary with a streaming standby for one test, which may kill
// the primary and promote the standby; [PgBouncers] starts a PostgreSQL
// server behind PgBouncer 1.18 and 1.26, shared by the test binary;
// [StartPatroni] starts a three-node Patroni cluster with etcd and HAProxy
// for one test; [StartGroupReplication] a three-member MySQL Group
// Replication cluster with MySQL Router for one test. Each runs on Docker
// networks of its own. [Vitess] starts a vttestserver (a keyspace of two
// shards behind vtgate), shared by the test binary.
//
// Every container and network started here carries the label [Label], so
// strays left by a killed test binary can be found and removed with
//
//	docker rm -f $(docker ps -aq --filter label=org.idemkit.idem.test)
//	docker network rm $(docker network ls -q --filter label=org.idemkit.idem.test)
package containers

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	_ "github.com/go-sql-driver/mysql" // driver "mysql" for the MySQL wait strategy
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tcmysql "github.com/testcontainers/testcontainers-go/modules/mysql"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
	"github.com/testcontainers/testcontainers-go/wait"
)

// Environment variables read by this package.
const (
	// EnvPostgresDSN names the variable holding the DSN of an existing
	// PostgreSQL server; when set, no container is started.
	EnvPostgresDSN = "IDEM_POSTGRES_DSN"
	// EnvPostgresImage names the variable holding the PostgreSQL image to
	// start; [DefaultPostgresImage] when unset.
	EnvPostgresImage = "IDEM_POSTGRES_IMAGE"
	// EnvMySQLDSN names the variable holding the go-sql-driver DSN of an
	// existing MySQL or MariaDB server; when set, no container is started.
	EnvMySQLDSN = "IDEM_MYSQL_DSN"
	// EnvMySQLImage names the variable holding the MySQL or MariaDB image to
	// start; [DefaultMySQLImage] when unset.
	EnvMySQLImage = "IDEM_MYSQL_IMAGE"
	// EnvRequire names the variable listing the backends ("postgres",
	// "mysql", "nats", "galera", "pgbouncer", "patroni", "grouprepl", or
	// "all"), comma-separated, whose absence fails tests instead of
	// skipping them.
	EnvRequire = "IDEM_REQUIRE"
)

// Default images, the official ones.
const (
	// DefaultPostgresImage is the PostgreSQL image used when
	// IDEM_POSTGRES_IMAGE is unset.
	DefaultPostgresImage = "postgres:17"
	// DefaultMySQLImage is the MySQL image used when IDEM_MYSQL_IMAGE is
	// unset.
	DefaultMySQLImage = "mysql:8.4"
)

// Label is the key of the Docker label set on every container and network
// this package starts; its value is the backend or cluster: "postgres",
// "mysql", "nats", "galera", "postgres-replication", "pgbouncer",
// "patroni", "grouprepl", "vitess".
const Label = "org.idemkit.idem.test"

// Credentials of the servers started here.
const (
	pgUser     = "idem"
	pgPassword = "idem"
	pgDatabase = "idem"

	myUser     = "root" // root may create databases, which tests may want
	myPassword = "idem"
	myDatabase = "idem"
)

// Time limits, so that a broken engine or image fails instead of hanging.
const (
	dockerTimeout    = 20 * time.Second // reaching the engine, inspecting an image
	pullTimeout      = 10 * time.Minute // pulling an image that is not present
	startTimeout     = 3 * time.Minute  // creating and starting a container until ready
	readyTimeout     = 2 * time.Minute  // the MySQL wait strategy
	terminateTimeout = time.Minute
	logTailLines     = 30
)

// server is one backend: its lazily started, per-binary container.
type server struct {
	name         string // "postgres" or "mysql", as in IDEM_REQUIRE
	title        string // for messages
	dsnEnv       string
	imageEnv     string
	defaultImage string
	standin      string // image scripts/standin/build makes
	start        func(ctx context.Context, image string) (testcontainers.Container, string, error)
	// requiredDocker: where a Docker engine answers, a backend that cannot
	// be had fails the test (not only when IDEM_REQUIRE names it), unless
	// the variable optionalEnv says "true".
	requiredDocker bool
	optionalEnv    string
	// ensure reports why image cannot be used ("" when it can) and
	// whether that is because no Docker engine answers; nil means
	// ensureImage. Tests replace it.
	ensure func(image string) (reason string, noDocker bool)

	mu          sync.Mutex
	started     bool
	terminated  bool
	ctr         testcontainers.Container
	dsn         string
	unavailable string // why the backend cannot be had: skip, or fail if required
	noDocker    bool   // unavailable because no Docker engine answers
	err         error  // the container failed to start: always fail
}

var (
	postgresServer = &server{
		name:         "postgres",
		title:        "PostgreSQL",
		dsnEnv:       EnvPostgresDSN,
		imageEnv:     EnvPostgresImage,
		defaultImage: DefaultPostgresImage,
		standin:      "idem-standin/postgres:15",
		start:        startPostgres,
	}
	mysqlServer = &server{
		name:         "mysql",
		title:        "MySQL",
		dsnEnv:       EnvMySQLDSN,
		imageEnv:     EnvMySQLImage,
		defaultImage: DefaultMySQLImage,
		standin:      "idem-standin/mariadb:10.11",
		start:        startMySQL,
	}
)

// Postgres returns the DSN of a PostgreSQL server for tb: IDEM_POSTGRES_DSN
// when set, else that of the container this test binary shares, started on
// the first call. A started server's DSN has the form
//
//	postgres://idem:idem@localhost:PORT/idem?sslmode=disable
//
// where user idem is a superuser (it may create databases and roles) and the
// server accepts 200 connections. Postgres skips tb, or fails it when
// IDEM_REQUIRE names postgres, if no server can be had; it fails tb if the
// container does not start. It is safe for concurrent use.
func Postgres(tb testing.TB) string {
	tb.Helper()
	return postgresServer.dsnFor(tb)
}

// MySQL returns the go-sql-driver/mysql DSN of a MySQL or MariaDB server for
// tb: IDEM_MYSQL_DSN when set, else that of the container this test binary
// shares, started on the first call. A started server's DSN has the form
//
//	root:idem@tcp(localhost:PORT)/idem
//
// with no parameters, so the caller appends its own ("?parseTime=true"...);
// root may create databases, and the server accepts 500 connections. MySQL
// skips tb, or fails it when IDEM_REQUIRE names mysql, if no server can be
// had; it fails tb if the container does not start. It is safe for
// concurrent use.
func MySQL(tb testing.TB) string {
	tb.Helper()
	return mysqlServer.dsnFor(tb)
}

// Terminate stops and removes every container this test binary started
// (and the Galera cluster's networks) and returns the errors met doing so.
// Later calls to [Postgres], [MySQL] or [Galera] that would need a container
// fail. Call it after m.Run in TestMain (see [Main]): with Ryuk disabled
// nothing else removes the containers.
func Terminate() error {
	return errors.Join(postgresServer.terminate(), mysqlServer.terminate(), natsServer.terminate(), vitessServer.terminate(), terminateGalera(), terminatePgBouncers())
}

// Main runs the tests of m, calls [Terminate], reports its error on stderr,
// and exits with the tests' status. It is meant to be a package's TestMain:
//
//	func TestMain(m *testing.M) { containers.Main(m) }
func Main(m *testing.M) { MainDiagnosing(m, nil) }

// MainDiagnosing is [Main] with diagnose, when set, run after a failed run
// and before the containers are terminated, while what the tests saw is
// still there to read: a stall's locks, a server's state.
func MainDiagnosing(m *testing.M, diagnose func()) {
	code := m.Run()
	if code != 0 && diagnose != nil {
		diagnose()
	}
	if err := Terminate(); err != nil {
		fmt.Fprintf(os.Stderr, "containers: terminate: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

func (s *server) dsnFor(tb testing.TB) string {
	tb.Helper()
	if dsn := os.Getenv(s.dsnEnv); dsn != "" {
		return dsn
	}
	dsn, unavailable, err := s.get()
	switch {
	case err != nil:
		tb.Fatalf("%s: %v", s.title, err)
	case unavailable != "":
		msg := fmt.Sprintf("%s: %s.\nUse an existing server with %s, or a Docker engine with image %s (default %s; "+
			"without an image registry run scripts/standin/build and set %s=%s, as ./scripts/test does).",
			s.title, unavailable, s.dsnEnv, s.imageEnv, s.defaultImage, s.imageEnv, s.standin)
		if required(s.name) {
			tb.Fatalf("%s\n%s names %s, so this is a failure.", msg, EnvRequire, s.name)
		}
		if s.requiredDocker && !s.noDocker {
			if !optional(s.optionalEnv) {
				tb.Fatalf("%s\nA Docker engine answers, so %s is required: this is a failure (set %s=true to skip instead).", msg, s.title, s.optionalEnv)
			}
			tb.Skipf("%s\n%s=true, so this is a skip.", msg, s.optionalEnv)
		}
		tb.Skipf("%s\nSet %s=%s to make this a failure.", msg, EnvRequire, s.name)
	}
	return dsn
}

// get returns the outcome of starting the container, starting it on the
// first call.
func (s *server) get() (dsn, unavailable string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.terminated {
		return "", "", errors.New("containers.Terminate was already called in this test binary")
	}
	if !s.started {
		s.started = true
		s.launch()
	}
	return s.dsn, s.unavailable, s.err
}

// launch finds the image and starts the container, recording the outcome.
// s.mu is held.
func (s *server) launch() {
	image := os.Getenv(s.imageEnv)
	if image == "" {
		image = s.defaultImage
	}
	ensure := s.ensure
	if ensure == nil {
		ensure = ensureImage
	}
	if reason, noDocker := ensure(image); reason != "" {
		s.unavailable, s.noDocker = reason, noDocker
		return
	}

	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	begin := time.Now()
	ctr, dsn, err := s.start(ctx, image)
	if err != nil {
		err = fmt.Errorf("start container from image %s (limit %s): %w", image, startTimeout, err)
		if ctr != nil {
			if tail := logTail(ctr); tail != "" {
				err = fmt.Errorf("%w\nlast lines of the container's log:\n%s", err, tail)
			}
			if terr := testcontainers.TerminateContainer(ctr, testcontainers.StopTimeout(5*time.Second)); terr != nil {
				err = fmt.Errorf("%w\nremoving the container also failed: %v", err, terr)
			}
		}
		s.err = err
		return
	}
	s.ctr, s.dsn = ctr, dsn
	fmt.Fprintf(os.Stderr, "containers: %s from %s ready in %.1fs\n", s.title, image, time.Since(begin).Seconds())
}

func (s *server) terminate() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.terminated = true
	if s.ctr == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), terminateTimeout)
	defer cancel()
	err := testcontainers.TerminateContainer(s.ctr,
		testcontainers.StopContext(ctx), testcontainers.StopTimeout(10*time.Second))
	s.ctr = nil
	if err != nil {
		return fmt.Errorf("%s container: %w", s.title, err)
	}
	return nil
}

// ensureImage reports why image cannot be used: no Docker engine (then
// noDocker is true), or the image is neither present nor pullable. It
// returns "" when it can.
func ensureImage(image string) (reason string, noDocker bool) {
	defer func() {
		// Docker host detection in testcontainers can panic when no
		// engine is configured at all.
		if r := recover(); r != nil {
			reason, noDocker = fmt.Sprintf("no usable Docker engine (%v)", r), true
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), dockerTimeout)
	defer cancel()
	// testcontainers falls back to the default socket when DOCKER_HOST does
	// not answer; a DOCKER_HOST set on purpose is taken at its word here.
	if host := os.Getenv("DOCKER_HOST"); host != "" {
		if err := pingDockerHost(ctx); err != nil {
			return fmt.Sprintf("no usable Docker engine (DOCKER_HOST=%s: %v)", host, err), true
		}
	}
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return fmt.Sprintf("no usable Docker engine (DOCKER_HOST unset or unreachable, no Docker socket found; testcontainers: %v)", err), true
	}
	defer func() { _ = cli.Close() }()

	_, err = cli.ImageInspect(ctx, image)
	if err == nil {
		return "", false
	}
	if !errdefs.IsNotFound(err) {
		return fmt.Sprintf("no usable Docker engine (inspect image %s: %v)", image, err), true
	}

	pctx, pcancel := context.WithTimeout(context.Background(), pullTimeout)
	defer pcancel()
	resp, err := cli.ImagePull(pctx, image, client.ImagePullOptions{})
	if err == nil {
		err = resp.Wait(pctx)
	}
	if err != nil {
		return fmt.Sprintf("image %s is not present and could not be pulled (%v)", image, err), false
	}
	return "", false
}

// pingDockerHost pings the engine that the Docker environment variables
// (DOCKER_HOST, DOCKER_TLS_VERIFY...) name.
func pingDockerHost(ctx context.Context) error {
	cli, err := client.New(client.FromEnv)
	if err != nil {
		return err
	}
	defer func() { _ = cli.Close() }()
	_, err = cli.Ping(ctx, client.PingOptions{})
	return err
}

// labels returns the labels of a container for backend.
func labels(backend string) map[string]string {
	return map[string]string{
		Label:                     backend,
		"org.idemkit.idem.pid":    strconv.Itoa(os.Getpid()),
		"org.idemkit.idem.binary": testBinary(),
	}
}

func testBinary() string {
	if len(os.Args) == 0 {
		return ""
	}
	return os.Args[0]
}

func startPostgres(ctx context.Context, image string) (testcontainers.Container, string, error) {
	return runPostgres(ctx, image, testcontainers.WithLabels(labels("postgres")))
}

// runPostgres starts the PostgreSQL container, changed by more.
func runPostgres(ctx context.Context, image string, more ...testcontainers.ContainerCustomizer) (testcontainers.Container, string, error) {
	ctr, err := tcpostgres.Run(ctx, image, append([]testcontainers.ContainerCustomizer{
		tcpostgres.WithDatabase(pgDatabase),
		tcpostgres.WithUsername(pgUser),
		tcpostgres.WithPassword(pgPassword),
		tcpostgres.BasicWaitStrategies(),
		// Appended to the module's "postgres -c fsync=off".
		testcontainers.WithCmdArgs("-c", "max_connections=200"),
	}, more...)...)
	if err != nil {
		if ctr == nil {
			return nil, "", err
		}
		return ctr, "", err
	}
	dsn, err := ctr.ConnectionString(ctx, "sslmode=disable")
	if err != nil {
		return ctr, "", fmt.Errorf("connection string: %w", err)
	}
	return ctr, dsn, nil
}

func startMySQL(ctx context.Context, image string) (testcontainers.Container, string, error) {
	return runMySQL(ctx, image, testcontainers.WithLabels(labels("mysql")))
}

// runMySQL starts the MySQL container, changed by more.
func runMySQL(ctx context.Context, image string, more ...testcontainers.ContainerCustomizer) (testcontainers.Container, string, error) {
	pingDSN := func(host string, port network.Port) string {
		return fmt.Sprintf("%s:%s@tcp(%s)/%s", myUser, myPassword, net.JoinHostPort(host, port.Port()), myDatabase)
	}
	ctr, err := tcmysql.Run(ctx, image, append([]testcontainers.ContainerCustomizer{
		tcmysql.WithUsername(myUser),
		tcmysql.WithPassword(myPassword),
		tcmysql.WithDatabase(myDatabase),
		// Every entrypoint (official mysql and mariadb, the stand-in) runs
		// the server with arguments that start with "-".
		testcontainers.WithCmd("--max-connections=500"),
		// The ready lines of MySQL and MariaDB differ, and the official
		// images start a temporary server without TCP first; so wait for
		// the port to listen inside the container, then for a query.
		testcontainers.WithWaitStrategyAndDeadline(readyTimeout,
			wait.ForListeningPort("3306/tcp").WithStartupTimeout(readyTimeout),
			wait.ForSQL("3306/tcp", "mysql", pingDSN).WithStartupTimeout(readyTimeout).WithPollInterval(250*time.Millisecond),
		),
	}, more...)...)
	if err != nil {
		if ctr == nil {
			return nil, "", err
		}
		return ctr, "", err
	}
	dsn, err := ctr.ConnectionString(ctx)
	if err != nil {
		return ctr, "", fmt.Errorf("connection string: %w", err)
	}
	return ctr, dsn, nil
}

// logTail returns the last lines of ctr's log, for start failures.
func logTail(ctr testcontainers.Container) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rc, err := ctr.Logs(ctx)
	if err != nil {
		return ""
	}
	defer rc.Close()
	var lines []string
	sc := bufio.NewScanner(io.LimitReader(rc, 4<<20))
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > logTailLines {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// required reports whether IDEM_REQUIRE names backend.
func required(backend string) bool {
	for _, f := range strings.FieldsFunc(os.Getenv(EnvRequire), func(r rune) bool {
		return r == ',' || r == ' ' || r == '\t'
	}) {
		switch strings.ToLower(f) {
		case "all", backend:
			return true
		case "postgresql", "pg":
			if backend == "postgres" {
				return true
			}
		case "mariadb":
			if backend == "mysql" {
				return true
			}
		}
	}
	return false
}
