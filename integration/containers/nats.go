package containers

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// Environment variables for the NATS server.
const (
	// EnvNATSURL names the variable holding the URL of an existing NATS
	// server with JetStream (nats://host:4222); when set, no container is
	// started.
	EnvNATSURL = "IDEM_NATS_URL"
	// EnvNATSImage names the variable holding the NATS image to start;
	// [DefaultNATSImage] when unset.
	EnvNATSImage = "IDEM_NATS_IMAGE"
	// EnvNATSOptional names the variable that, set to "true" (or "1"),
	// lets tests skip when NATS cannot be had although Docker works. By
	// default the broker is required wherever Docker is: a missing image
	// fails the test instead of silently skipping the consumer tests.
	EnvNATSOptional = "IDEM_NATS_OPTIONAL"
)

// DefaultNATSImage is the NATS image used when IDEM_NATS_IMAGE is unset.
const DefaultNATSImage = "nats:2.10"

var natsServer = &server{
	name:           "nats",
	title:          "NATS",
	dsnEnv:         EnvNATSURL,
	imageEnv:       EnvNATSImage,
	defaultImage:   DefaultNATSImage,
	standin:        "idem-standin/nats:2.10",
	start:          startNATS,
	requiredDocker: true,
	optionalEnv:    EnvNATSOptional,
}

// NATS returns the URL of a NATS server with JetStream for tb:
// IDEM_NATS_URL when set, else that of the container this test binary
// shares, started on the first call, in the form
//
//	nats://localhost:PORT
//
// with its client port mapped on 127.0.0.1 only. Tests share the server:
// give each test streams and consumers of its own names.
//
// Without a usable Docker engine NATS skips tb, unless IDEM_REQUIRE names
// nats. With one, a NATS that cannot be had (the image is neither present
// nor pullable) fails tb unless IDEM_NATS_OPTIONAL=true. It is safe for
// concurrent use.
func NATS(tb testing.TB) string {
	tb.Helper()
	return natsServer.dsnFor(tb)
}

// optional reports whether the variable env says "true" or "1".
func optional(env string) bool {
	switch strings.ToLower(os.Getenv(env)) {
	case "1", "true", "yes":
		return true
	}
	return false
}

func startNATS(ctx context.Context, image string) (testcontainers.Container, string, error) {
	loopback := []network.PortBinding{{HostIP: netip.MustParseAddr("127.0.0.1")}}
	ctr, err := testcontainers.Run(ctx, image,
		testcontainers.WithExposedPorts("4222/tcp", "8222/tcp"),
		// The official image's entrypoint is nats-server; the stand-in's
		// runs nats-server with JetStream on for arguments that start with
		// "-". Either way: JetStream on, monitoring on 8222.
		testcontainers.WithCmd("-js", "-m", "8222"),
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
			hc.PortBindings = network.PortMap{
				network.MustParsePort("4222/tcp"): loopback,
				network.MustParsePort("8222/tcp"): loopback,
			}
		}),
		testcontainers.WithWaitStrategyAndDeadline(readyTimeout,
			wait.ForListeningPort("4222/tcp").WithStartupTimeout(readyTimeout),
			// /healthz?js-enabled-only=true answers 200 once JetStream is up.
			wait.ForHTTP("/healthz?js-enabled-only=true").WithPort("8222/tcp").
				WithStartupTimeout(readyTimeout).WithPollInterval(200*time.Millisecond),
		),
		testcontainers.WithLabels(labels("nats")),
	)
	if err != nil {
		if ctr == nil {
			return nil, "", err
		}
		return ctr, "", err
	}
	host, port, err := endpoint(ctx, ctr, "4222/tcp")
	if err != nil {
		return ctr, "", err
	}
	return ctr, fmt.Sprintf("nats://%s:%s", host, port), nil
}
