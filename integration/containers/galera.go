package containers

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/network"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// EnvGaleraImage names the variable holding the Galera node image;
// [DefaultGaleraImage] when unset. The image must follow the environment
// contract of scripts/standin/galera/docker-entrypoint.sh.
const EnvGaleraImage = "IDEM_GALERA_IMAGE"

// DefaultGaleraImage is the stand-in image scripts/standin/build makes
// (target galera:11.8): MariaDB 11.8 with Galera 4.
const DefaultGaleraImage = "idem-standin/galera:11.8"

// galeraStartTimeout bounds starting the whole cluster: the bootstrap node,
// then two joiners that each receive a state snapshot.
const galeraStartTimeout = 4 * time.Minute

// galeraArgs are the mariadbd options of every node, after the image's own.
// Shorter failure detection than Galera's defaults (5 s suspect, 15 s
// inactive) keeps a partition test short; a small gcache and buffer pool
// keep three nodes light; flushing the InnoDB log once a second is how
// Galera clusters commonly run, the cluster being the durability.
var galeraArgs = []string{
	"--wsrep-provider-options=evs.suspect_timeout=PT3S;evs.inactive_timeout=PT5S;evs.install_timeout=PT5S;gcache.size=32M",
	"--max-connections=300",
	"--innodb-buffer-pool-size=64M",
	"--innodb-flush-log-at-trx-commit=2",
}

// GaleraCluster is a three-node MariaDB Galera cluster: every node takes
// reads and writes. The nodes replicate over a network of their own (the
// group network, where node n1 is reachable as "n1"); tests reach each node
// on a port mapped on localhost, through another network, so that taking a
// node off the group network (Partition) cuts it from the cluster but not
// from the test.
type GaleraCluster struct {
	image string
	nodes []*GaleraNode
	front *dockerNetwork // the mapped ports
	group *dockerNetwork // group communication and state transfers
	nets  []*dockerNetwork
}

// GaleraNode is one node of a [GaleraCluster].
type GaleraNode struct {
	// Name is the node's wsrep_node_name and its address on the group
	// network: n1, n2, n3.
	Name string
	// DSN is the go-sql-driver/mysql DSN of the node, without parameters:
	// root:idem@tcp(localhost:PORT)/idem.
	DSN string

	ctr   testcontainers.Container
	admin *sql.DB // for status queries
}

// GaleraStatus is what a node says of itself and its cluster.
type GaleraStatus struct {
	// ClusterStatus is wsrep_cluster_status: "Primary", or "non-Primary"
	// for a node cut off from the majority.
	ClusterStatus string
	// ClusterSize is wsrep_cluster_size as the node sees it.
	ClusterSize int
	// LocalState is wsrep_local_state_comment ("Synced", "Donor/Desynced",
	// "Initialized"...).
	LocalState string
	// Ready is wsrep_ready: the node accepts queries.
	Ready bool
}

// Healthy reports whether the node is a synced, ready member of a primary
// component of size nodes.
func (s GaleraStatus) Healthy(nodes int) bool {
	return s.ClusterStatus == "Primary" && s.ClusterSize == nodes && s.LocalState == "Synced" && s.Ready
}

// galeraShared is the cluster this test binary shares.
var galeraShared struct {
	mu          sync.Mutex
	started     bool
	terminated  bool
	cluster     *GaleraCluster
	unavailable string
	err         error
}

// Galera returns the three-node Galera cluster this test binary shares,
// started on the first call (in about half a minute) from the image named
// by IDEM_GALERA_IMAGE. Galera skips tb, or fails it when IDEM_REQUIRE names
// galera, if the image cannot be had; it fails tb if the cluster does not
// start. [Terminate] removes the cluster. Tests that partition a node must
// heal it before they end (see [GaleraCluster.Heal]).
func Galera(tb testing.TB) *GaleraCluster {
	tb.Helper()
	galeraShared.mu.Lock()
	defer galeraShared.mu.Unlock()
	if galeraShared.terminated {
		tb.Fatal("containers.Terminate was already called in this test binary")
	}
	if !galeraShared.started {
		galeraShared.started = true
		image := os.Getenv(EnvGaleraImage)
		if image == "" {
			image = DefaultGaleraImage
		}
		if reason, _ := ensureImage(image); reason != "" {
			galeraShared.unavailable = reason
		} else {
			ctx, cancel := context.WithTimeout(context.Background(), galeraStartTimeout)
			begin := time.Now()
			c, err := startGalera(ctx, image)
			cancel()
			if err != nil {
				if c != nil {
					if rerr := c.remove(); rerr != nil {
						err = fmt.Errorf("%w\nremoving the cluster also failed: %v", err, rerr)
					}
				}
				galeraShared.err = fmt.Errorf("start Galera cluster from image %s (limit %s): %w", image, galeraStartTimeout, err)
			} else {
				galeraShared.cluster = c
				fmt.Fprintf(os.Stderr, "containers: Galera cluster of %d nodes from %s ready in %.1fs\n", len(c.nodes), image, time.Since(begin).Seconds())
			}
		}
	}
	switch {
	case galeraShared.err != nil:
		tb.Fatal(galeraShared.err)
	case galeraShared.unavailable != "":
		msg := fmt.Sprintf("Galera: %s.\nBuild it with scripts/standin/build galera:11.8 (./scripts/test does), or name another image with %s.",
			galeraShared.unavailable, EnvGaleraImage)
		if required("galera") {
			tb.Fatalf("%s\n%s names galera, so this is a failure.", msg, EnvRequire)
		}
		tb.Skipf("%s\nSet %s=galera to make this a failure.", msg, EnvRequire)
	}
	return galeraShared.cluster
}

// terminateGalera removes the shared cluster, if one was started.
func terminateGalera() error {
	galeraShared.mu.Lock()
	defer galeraShared.mu.Unlock()
	galeraShared.terminated = true
	c := galeraShared.cluster
	galeraShared.cluster = nil
	if c == nil {
		return nil
	}
	if err := c.remove(); err != nil {
		return fmt.Errorf("Galera cluster: %w", err)
	}
	return nil
}

// startGalera starts the bootstrap node, then the others together, and
// waits until every node is a synced member of one primary component. On
// failure it returns what it started, for removal.
func startGalera(ctx context.Context, image string) (*GaleraCluster, error) {
	c := &GaleraCluster{image: image}
	// "a-front" sorts before "b-group": the mapped port stays on front.
	nets, err := newNetworks(ctx, "galera", "a-front", "b-group")
	c.nets = nets
	if err != nil {
		return c, err
	}
	c.front, c.group = nets[0], nets[1]
	const size = 3
	members := make([]string, size)
	for i := range members {
		members[i] = "n" + strconv.Itoa(i+1)
		c.nodes = append(c.nodes, &GaleraNode{Name: members[i]})
	}
	address := "gcomm://" + strings.Join(members, ",")

	if err := c.startNode(ctx, c.nodes[0], address, true); err != nil {
		return c, fmt.Errorf("bootstrap node %s: %w", c.nodes[0].Name, err)
	}
	// Joiners may only start once the bootstrap node accepts connections.
	errs := make([]error, size)
	var wg sync.WaitGroup
	for i, n := range c.nodes[1:] {
		wg.Go(func() {
			if err := c.startNode(ctx, n, address, false); err != nil {
				errs[i+1] = fmt.Errorf("node %s: %w", n.Name, err)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return c, err
	}
	return c, c.WaitHealthy(ctx)
}

// startNode starts one node and waits until it answers queries, which a
// joiner does only once it received the cluster's state.
func (c *GaleraCluster) startNode(ctx context.Context, n *GaleraNode, address string, bootstrap bool) error {
	env := map[string]string{
		"GALERA_CLUSTER_ADDRESS": address,
		"GALERA_NODE_NAME":       n.Name,
		"GALERA_NODE_ADDRESS":    n.Name,
		"GALERA_CLUSTER_NAME":    "idem",
		"MARIADB_ROOT_PASSWORD":  myPassword,
		"MARIADB_DATABASE":       myDatabase,
	}
	if bootstrap {
		env["GALERA_BOOTSTRAP"] = "1"
	}
	pingDSN := func(host string, port network.Port) string {
		return fmt.Sprintf("%s:%s@tcp(%s)/%s", myUser, myPassword, net.JoinHostPort(host, port.Port()), myDatabase)
	}
	ctr, err := testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{
		ContainerRequest: testcontainers.ContainerRequest{
			Image:        c.image,
			Env:          env,
			Cmd:          galeraArgs,
			ExposedPorts: []string{"3306/tcp"},
			// The first network is the container's at creation, and carries
			// its mapped port; the group network is joined after.
			Networks:       []string{c.front.Name, c.group.Name},
			NetworkAliases: map[string][]string{c.group.Name: {n.Name}},
			Labels:         labels("galera"),
			// A joining node opens its port only after its state transfer,
			// which on a loaded machine takes longer than testcontainers'
			// default of 60 s per strategy: each gets the cluster's limit.
			WaitingFor: wait.ForAll(
				wait.ForListeningPort("3306/tcp").WithStartupTimeout(galeraStartTimeout),
				// A node answers 1047 until it is a synced member.
				wait.ForSQL("3306/tcp", "mysql", pingDSN).WithStartupTimeout(galeraStartTimeout).WithPollInterval(250*time.Millisecond),
			).WithDeadline(galeraStartTimeout),
		},
		Started: true,
	})
	n.ctr = ctr
	if err != nil {
		if ctr != nil {
			if tail := logTail(ctr); tail != "" {
				err = fmt.Errorf("%w\nlast lines of the node's log:\n%s", err, tail)
			}
		}
		return err
	}
	port, err := ctr.MappedPort(ctx, "3306/tcp")
	if err != nil {
		return fmt.Errorf("mapped port: %w", err)
	}
	n.DSN = fmt.Sprintf("%s:%s@tcp(%s)/%s", myUser, myPassword, net.JoinHostPort("localhost", port.Port()), myDatabase)
	n.admin, err = sql.Open("mysql", n.DSN+"?timeout=5s&readTimeout=10s&writeTimeout=10s")
	if err != nil {
		return err
	}
	n.admin.SetMaxOpenConns(2)
	return nil
}

// Nodes returns the cluster's nodes, n1 first.
func (c *GaleraCluster) Nodes() []*GaleraNode { return c.nodes }

// Status reads n's view of itself and of the cluster. It works on a node
// cut off from the others too.
func (c *GaleraCluster) Status(ctx context.Context, n *GaleraNode) (GaleraStatus, error) {
	rows, err := n.admin.QueryContext(ctx, "SHOW STATUS WHERE Variable_name IN "+
		"('wsrep_cluster_status', 'wsrep_cluster_size', 'wsrep_local_state_comment', 'wsrep_ready')")
	if err != nil {
		return GaleraStatus{}, fmt.Errorf("status of %s: %w", n.Name, err)
	}
	defer rows.Close()
	var s GaleraStatus
	for rows.Next() {
		var name, value string
		if err := rows.Scan(&name, &value); err != nil {
			return s, fmt.Errorf("status of %s: %w", n.Name, err)
		}
		switch strings.ToLower(name) {
		case "wsrep_cluster_status":
			s.ClusterStatus = value
		case "wsrep_cluster_size":
			s.ClusterSize, _ = strconv.Atoi(value)
		case "wsrep_local_state_comment":
			s.LocalState = value
		case "wsrep_ready":
			s.Ready = strings.EqualFold(value, "ON")
		}
	}
	if err := rows.Err(); err != nil {
		return s, fmt.Errorf("status of %s: %w", n.Name, err)
	}
	return s, nil
}

// WaitFor polls n's status every 250 ms until ok accepts it or ctx ends;
// then it returns the last status and an error saying what it waited for.
func (c *GaleraCluster) WaitFor(ctx context.Context, n *GaleraNode, what string, ok func(GaleraStatus) bool) (GaleraStatus, error) {
	var last GaleraStatus
	var lastErr error
	for {
		s, err := c.Status(ctx, n)
		if err == nil && ok(s) {
			return s, nil
		}
		last, lastErr = s, err
		select {
		case <-ctx.Done():
			return last, fmt.Errorf("node %s: waiting for %s: %w (last status %+v, last error %v)", n.Name, what, ctx.Err(), last, lastErr)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// WaitHealthy waits until every node is a synced, ready member of one
// primary component of all the nodes.
func (c *GaleraCluster) WaitHealthy(ctx context.Context) error {
	for _, n := range c.nodes {
		if _, err := c.WaitFor(ctx, n, "a healthy cluster", func(s GaleraStatus) bool { return s.Healthy(len(c.nodes)) }); err != nil {
			return err
		}
	}
	return nil
}

// Partition takes n off the group network: the others no longer reach it
// and it reaches none of them. After Galera's failure detection (about 5 s
// here) the others form a primary component without it and n, alone, is
// non-primary: it refuses queries with error 1047. Its mapped port keeps
// working.
func (c *GaleraCluster) Partition(ctx context.Context, n *GaleraNode) error {
	if err := disconnect(ctx, c.group, n.ctr); err != nil {
		return fmt.Errorf("partition node %s: %w", n.Name, err)
	}
	return nil
}

// Heal puts n back on the group network and waits until the whole cluster
// is healthy again (n rejoins by an incremental state transfer).
func (c *GaleraCluster) Heal(ctx context.Context, n *GaleraNode) error {
	if err := connect(ctx, c.group, n.ctr, n.Name); err != nil {
		return fmt.Errorf("heal node %s: %w", n.Name, err)
	}
	return c.WaitHealthy(ctx)
}

// remove closes the status pools, terminates the nodes and removes the
// networks.
func (c *GaleraCluster) remove() error {
	var ctrs []testcontainers.Container
	for _, n := range c.nodes {
		if n.admin != nil {
			n.admin.Close()
		}
		ctrs = append(ctrs, n.ctr)
	}
	return removeAll(ctrs, c.nets)
}
