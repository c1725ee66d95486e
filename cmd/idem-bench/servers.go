package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

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

	defaultPostgresImage = "postgres:17"
	defaultMySQLImage    = "mysql:8.4"

	containerLabel = "org.idemkit.idem.bench"
	startTimeout   = 3 * time.Minute
)

// server is a database the benchmark runs against.
type server struct {
	dsn    string
	image  string // "" for a DSN from the environment
	ctr    testcontainers.Container
	volume string
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
	v := "container filesystem"
	if s.volume != "" {
		v = "Docker volume"
	}
	return fmt.Sprintf("container %s, data on a %s", s.image, v)
}

func (s *server) terminate() error {
	if s == nil || s.ctr == nil {
		return nil
	}
	opts := []testcontainers.TerminateOption{testcontainers.StopTimeout(10 * time.Second)}
	if s.volume != "" {
		opts = append(opts, testcontainers.RemoveVolumes(s.volume))
	}
	err := testcontainers.TerminateContainer(s.ctr, opts...)
	s.ctr = nil
	return err
}

func imageFrom(env, def string) string {
	if v := os.Getenv(env); v != "" {
		return v
	}
	return def
}

func labels(backend string) map[string]string {
	return map[string]string{containerLabel: backend, "org.idemkit.idem.pid": strconv.Itoa(os.Getpid())}
}

// startPostgres starts PostgreSQL with durable commits (the testcontainers
// module turns fsync off by default; the benchmark measures with it on).
func startPostgres(ctx context.Context, useVolume bool) (*server, error) {
	if dsn := os.Getenv(envPostgresDSN); dsn != "" {
		return &server{dsn: dsn}, nil
	}
	s := &server{image: imageFrom(envPostgresImage, defaultPostgresImage)}
	opts := []testcontainers.ContainerCustomizer{
		tcpostgres.WithDatabase("idem"),
		tcpostgres.WithUsername("idem"),
		tcpostgres.WithPassword("idem"),
		tcpostgres.BasicWaitStrategies(),
		testcontainers.WithCmd("postgres", "-c", "fsync=on", "-c", "synchronous_commit=on", "-c", "max_connections=200",
			"-c", "shared_buffers=1GB"),
		testcontainers.WithLabels(labels("postgres")),
	}
	if useVolume {
		s.volume = fmt.Sprintf("idem-bench-pg-%d", os.Getpid())
		opts = append(opts, testcontainers.WithMounts(testcontainers.VolumeMount(s.volume, "/var/lib/postgresql/data")))
	}
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	ctr, err := tcpostgres.Run(ctx, s.image, opts...)
	s.ctr = ctr
	if err != nil {
		return s, fmt.Errorf("start %s: %w", s.image, err)
	}
	s.dsn, err = ctr.ConnectionString(ctx, "sslmode=disable")
	return s, err
}

// startMySQL starts MySQL or MariaDB with its default durability
// (innodb_flush_log_at_trx_commit=1).
func startMySQL(ctx context.Context, useVolume bool) (*server, error) {
	if dsn := os.Getenv(envMySQLDSN); dsn != "" {
		return &server{dsn: dsn}, nil
	}
	s := &server{image: imageFrom(envMySQLImage, defaultMySQLImage)}
	pingDSN := func(host string, port network.Port) string {
		return fmt.Sprintf("root:idem@tcp(%s)/idem", net.JoinHostPort(host, port.Port()))
	}
	opts := []testcontainers.ContainerCustomizer{
		tcmysql.WithUsername("root"),
		tcmysql.WithPassword("idem"),
		tcmysql.WithDatabase("idem"),
		testcontainers.WithCmd("--max-connections=500", "--innodb-buffer-pool-size=1G"),
		testcontainers.WithWaitStrategyAndDeadline(startTimeout,
			wait.ForListeningPort("3306/tcp").WithStartupTimeout(startTimeout),
			wait.ForSQL("3306/tcp", "mysql", pingDSN).WithStartupTimeout(startTimeout).WithPollInterval(250*time.Millisecond),
		),
		testcontainers.WithLabels(labels("mysql")),
	}
	if useVolume {
		s.volume = fmt.Sprintf("idem-bench-mysql-%d", os.Getpid())
		opts = append(opts, testcontainers.WithMounts(testcontainers.VolumeMount(s.volume, "/var/lib/mysql")))
	}
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	ctr, err := tcmysql.Run(ctx, s.image, opts...)
	s.ctr = ctr
	if err != nil {
		return s, fmt.Errorf("start %s: %w", s.image, err)
	}
	s.dsn, err = ctr.ConnectionString(ctx)
	return s, err
}

// terminateAll removes every container started, joining the errors.
func terminateAll(servers ...*server) error {
	var errs []error
	for _, s := range servers {
		if err := s.terminate(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
