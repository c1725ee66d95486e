package containers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
)

// The clusters (Galera, a replicated PostgreSQL) run on networks of their
// own: Docker bridge networks this package creates, labelled like its
// containers, and removes after them. Tests reach the servers only through
// ports mapped on localhost.

// dockerNetwork is a bridge network this package created.
type dockerNetwork struct {
	ID, Name string
}

// newNetworks creates one bridge network per role for a cluster of kind
// ("galera", "postgres-replication"), named idem-<kind>-<random>-<role>,
// the same random part for all. A container on several networks has its
// ports mapped through the one whose name sorts first (Docker picks the
// gateway network by name), so callers choose roles that sort that way. On
// failure it returns the networks it created, for removal.
func newNetworks(ctx context.Context, kind string, roles ...string) ([]*dockerNetwork, error) {
	cli, err := docker(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = cli.Close() }()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	var nets []*dockerNetwork
	for _, role := range roles {
		name := "idem-" + kind + "-" + hex.EncodeToString(b) + "-" + role
		res, err := cli.NetworkCreate(ctx, name, client.NetworkCreateOptions{Driver: "bridge", Labels: labels(kind)})
		if err != nil {
			return nets, fmt.Errorf("create network %s: %w", name, err)
		}
		nets = append(nets, &dockerNetwork{ID: res.ID, Name: name})
	}
	return nets, nil
}

// remove removes the network; its containers must be gone.
func (n *dockerNetwork) remove(ctx context.Context) error {
	cli, err := docker(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = cli.Close() }()
	_, err = cli.NetworkRemove(ctx, n.ID, client.NetworkRemoveOptions{})
	return err
}

// docker returns a client of the engine testcontainers uses, for what it has
// no call for: disconnecting a container from a network, killing or pausing
// one.
func docker(ctx context.Context) (*testcontainers.DockerClient, error) {
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return nil, fmt.Errorf("docker client: %w", err)
	}
	return cli, nil
}

// disconnect takes ctr off nw, as if its cable were pulled: nothing on nw
// reaches it any more, and it reaches nothing there.
func disconnect(ctx context.Context, nw *dockerNetwork, ctr testcontainers.Container) error {
	cli, err := docker(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = cli.Close() }()
	_, err = cli.NetworkDisconnect(ctx, nw.ID, client.NetworkDisconnectOptions{Container: ctr.GetContainerID(), Force: true})
	return err
}

// connect puts ctr back on nw under the given aliases.
func connect(ctx context.Context, nw *dockerNetwork, ctr testcontainers.Container, aliases ...string) error {
	cli, err := docker(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = cli.Close() }()
	_, err = cli.NetworkConnect(ctx, nw.ID, client.NetworkConnectOptions{
		Container:      ctr.GetContainerID(),
		EndpointConfig: &network.EndpointSettings{Aliases: aliases},
	})
	return err
}

// removeAll terminates the containers, then removes the networks, each
// within terminateTimeout, and returns every error met.
func removeAll(ctrs []testcontainers.Container, nets []*dockerNetwork) error {
	var errs []error
	for _, ctr := range ctrs {
		if ctr == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), terminateTimeout)
		err := testcontainers.TerminateContainer(ctr, testcontainers.StopContext(ctx), testcontainers.StopTimeout(5*time.Second))
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("container %s: %w", ctr.GetContainerID(), err))
		}
	}
	for _, nw := range nets {
		if nw == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), terminateTimeout)
		err := nw.remove(ctx)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("network %s: %w", nw.Name, err))
		}
	}
	return errors.Join(errs...)
}
