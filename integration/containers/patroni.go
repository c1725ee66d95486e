package containers

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tcexec "github.com/testcontainers/testcontainers-go/exec"
	"github.com/testcontainers/testcontainers-go/wait"
)

// EnvPatroniImage names the variable holding the Patroni image (etcd,
// Patroni with PostgreSQL, HAProxy, by role); [DefaultPatroniImage] when
// unset. It must follow the contract of
// scripts/standin/patroni/docker-entrypoint.sh.
const EnvPatroniImage = "IDEM_PATRONI_IMAGE"

// DefaultPatroniImage is the stand-in scripts/standin/build makes (target
// patroni:4): Patroni 4 with PostgreSQL 17, etcd and HAProxy, Debian trixie.
const DefaultPatroniImage = "idem-standin/patroni:4"

// patroniStartTimeout bounds starting etcd, three nodes and HAProxy until
// the cluster has a leader and a synchronous standby.
const patroniStartTimeout = 4 * time.Minute

// patroniPassword is the password of the superuser postgres (and of the
// user replicator).
const patroniPassword = "idem"

// PatroniCluster is three PostgreSQL 17 nodes managed by Patroni in
// synchronous mode (one synchronous standby: a commit the leader
// acknowledged is on it), with etcd as its DCS and HAProxy in front, routing
// to whichever node Patroni's REST API calls the primary. Tests reach
// HAProxy and each node's REST API on ports mapped on localhost.
type PatroniCluster struct {
	// DSN is HAProxy's: postgres://postgres:idem@localhost:PORT/postgres.
	DSN string
	// Nodes are n1, n2 and n3.
	Nodes []*PatroniNode

	etcd, haproxy testcontainers.Container
	nw            *dockerNetwork
}

// PatroniNode is one node of a [PatroniCluster].
type PatroniNode struct {
	// Name is the node's Patroni name and its address on the cluster's
	// network.
	Name string
	// API is the base URL of its REST API: http://localhost:PORT.
	API string
	// DSN is the node's own PostgreSQL, bypassing HAProxy.
	DSN string

	ctr testcontainers.Container
}

// PatroniMember is a node as GET /cluster reports it.
type PatroniMember struct {
	Name  string `json:"name"`
	Role  string `json:"role"`  // "leader", "sync_standby", "replica"
	State string `json:"state"` // "running", "streaming", ...
	Lag   any    `json:"lag"`
}

// PatroniOptions say how a [PatroniCluster] behaves.
type PatroniOptions struct {
	// PromoteDelay, when positive, is how long a node that took the leader
	// key waits before it promotes its PostgreSQL (Patroni's pre_promote).
	// Patroni's GET /primary answers 200 from the moment the node holds
	// the key, so HAProxy routes sessions to a server still in recovery
	// for about this long, less its checks' rise: what a slow promotion
	// does on a busy machine, every time.
	PromoteDelay time.Duration
}

// StartPatroni starts a cluster for tb and removes it when tb ends. It
// skips tb, or fails it when IDEM_REQUIRE names patroni, if the image
// cannot be had; it fails tb if the cluster is not healthy within the
// start bound.
func StartPatroni(tb testing.TB, opts PatroniOptions) *PatroniCluster {
	tb.Helper()
	image := os.Getenv(EnvPatroniImage)
	if image == "" {
		image = DefaultPatroniImage
	}
	if reason, _ := ensureImage(image); reason != "" {
		msg := fmt.Sprintf("Patroni: %s.\nBuild it with scripts/standin/build patroni:4 (./scripts/test does), or name another image with %s.", reason, EnvPatroniImage)
		if required("patroni") {
			tb.Fatalf("%s\n%s names patroni, so this is a failure.", msg, EnvRequire)
		}
		tb.Skipf("%s\nSet %s=patroni to make this a failure.", msg, EnvRequire)
	}
	ctx, cancel := context.WithTimeout(context.Background(), patroniStartTimeout)
	defer cancel()
	begin := time.Now()
	c := &PatroniCluster{}
	tb.Cleanup(func() {
		if err := c.remove(); err != nil {
			tb.Errorf("remove the Patroni cluster: %v", err)
		}
	})
	if err := c.start(ctx, image, opts); err != nil {
		tb.Fatalf("start a Patroni cluster from %s (limit %s): %v", image, patroniStartTimeout, err)
	}
	tb.Logf("Patroni cluster of %d nodes from %s healthy in %.1fs", len(c.Nodes), image, time.Since(begin).Seconds())
	return c
}

func (c *PatroniCluster) start(ctx context.Context, image string, opts PatroniOptions) error {
	nets, err := newNetworks(ctx, "patroni", "net")
	if len(nets) > 0 {
		c.nw = nets[0]
	}
	if err != nil {
		return err
	}
	run := func(name string, env map[string]string, cmd string, ports []string, ready wait.Strategy) (testcontainers.Container, error) {
		ctr, err := testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{
			ContainerRequest: testcontainers.ContainerRequest{
				Image:          image,
				Env:            env,
				Cmd:            []string{cmd},
				ExposedPorts:   ports,
				Networks:       []string{c.nw.Name},
				NetworkAliases: map[string][]string{c.nw.Name: {name}},
				Labels:         labels("patroni"),
				WaitingFor:     ready,
			},
			Started: true,
		})
		if err != nil {
			return ctr, withLog(fmt.Errorf("%s: %w", name, err), ctr)
		}
		return ctr, nil
	}
	if c.etcd, err = run("etcd", nil, "etcd", []string{"2379/tcp"},
		wait.ForListeningPort("2379/tcp").WithStartupTimeout(patroniStartTimeout)); err != nil {
		return err
	}
	names := []string{"n1", "n2", "n3"}
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		n := &PatroniNode{Name: name}
		c.Nodes = append(c.Nodes, n)
		wg.Go(func() {
			env := map[string]string{"PATRONI_NAME": name, "PATRONI_PASSWORD": patroniPassword}
			if opts.PromoteDelay > 0 {
				env["PATRONI_PRE_PROMOTE"] = fmt.Sprintf("sleep %.3f", opts.PromoteDelay.Seconds())
			}
			n.ctr, errs[i] = run(name, env, "patroni", []string{"5432/tcp", "8008/tcp"},
				wait.ForListeningPort("8008/tcp").WithStartupTimeout(patroniStartTimeout))
			if errs[i] == nil {
				errs[i] = n.endpoints(ctx)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if c.haproxy, err = run("haproxy", map[string]string{"HAPROXY_NODES": strings.Join(names, " ")}, "haproxy",
		[]string{"5000/tcp"}, wait.ForListeningPort("5000/tcp").WithStartupTimeout(patroniStartTimeout)); err != nil {
		return err
	}
	port, err := c.haproxy.MappedPort(ctx, "5000/tcp")
	if err != nil {
		return err
	}
	c.DSN = fmt.Sprintf("postgres://postgres:%s@%s/postgres?sslmode=disable", patroniPassword, net.JoinHostPort("localhost", port.Port()))
	_, err = c.WaitHealthy(ctx)
	return err
}

// Members asks the nodes, in turn, for the cluster as Patroni sees it.
func (c *PatroniCluster) Members(ctx context.Context) ([]PatroniMember, error) {
	var errs []error
	for _, n := range c.Nodes {
		var body struct {
			Members []PatroniMember `json:"members"`
		}
		if err := n.get(ctx, "/cluster", &body); err != nil {
			errs = append(errs, err)
			continue
		}
		return body.Members, nil
	}
	return nil, errors.Join(errs...)
}

// WaitHealthy waits, within ctx, until the cluster has a leader, a
// streaming synchronous standby and a streaming replica, and HAProxy
// reaches the leader; it returns the leader's name.
func (c *PatroniCluster) WaitHealthy(ctx context.Context) (string, error) {
	var last string
	for {
		members, err := c.Members(ctx)
		leader, sync, replicas := "", 0, 0
		for _, m := range members {
			switch {
			case m.Role == "leader" && m.State == "running":
				leader = m.Name
			case m.Role == "sync_standby" && m.State == "streaming":
				sync++
			case m.Role == "replica" && m.State == "streaming":
				replicas++
			}
		}
		last = fmt.Sprintf("members %+v, error %v", members, err)
		if leader != "" && sync == 1 && replicas == 1 {
			err := c.primaryAnswers(ctx)
			if err == nil {
				return leader, nil
			}
			last += fmt.Sprintf("; through HAProxy: %v", err)
		}
		select {
		case <-ctx.Done():
			logs := []string{}
			for _, n := range c.Nodes {
				if n.ctr != nil {
					logs = append(logs, n.Name+":\n"+logTail(n.ctr))
				}
			}
			return "", fmt.Errorf("the cluster is not healthy: %w (last: %s)\n%s", ctx.Err(), last, strings.Join(logs, "\n"))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// primaryAnswers checks that a session through HAProxy is on a primary.
func (c *PatroniCluster) primaryAnswers(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	db, err := sql.Open("pgx", c.DSN+"&connect_timeout=2")
	if err != nil {
		return err
	}
	defer db.Close()
	var standby bool
	if err := db.QueryRowContext(ctx, "SELECT pg_is_in_recovery()").Scan(&standby); err != nil {
		return err
	}
	if standby {
		return errors.New("HAProxy reached a standby")
	}
	return nil
}

// Node returns the node named name.
func (c *PatroniCluster) Node(name string) *PatroniNode {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// Switchover asks Patroni for a planned switchover away from leader (to
// the synchronous standby) and returns once Patroni accepted it.
func (c *PatroniCluster) Switchover(ctx context.Context, leader string) error {
	body := strings.NewReader(fmt.Sprintf(`{"leader": %q}`, leader))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.Node(leader).API+"/switchover", body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("switchover: %w", err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("switchover: %s: %s", resp.Status, strings.TrimSpace(string(msg)))
	}
	return nil
}

// KillPostmaster kills the node's PostgreSQL postmaster at once (SIGKILL),
// leaving Patroni running.
func (n *PatroniNode) KillPostmaster(ctx context.Context) error {
	code, out, err := n.ctr.Exec(ctx, []string{"sh", "-c", "kill -KILL $(head -1 /var/lib/postgresql/data/postmaster.pid)"}, tcexec.Multiplexed())
	if err != nil {
		return fmt.Errorf("kill the postmaster of %s: %w", n.Name, err)
	}
	if code != 0 {
		msg, _ := io.ReadAll(out)
		return fmt.Errorf("kill the postmaster of %s: exit code %d: %s", n.Name, code, strings.TrimSpace(string(msg)))
	}
	return nil
}

// Kill kills the node's container at once (SIGKILL): Patroni and PostgreSQL
// die together, so the node holds its leader key until the key's TTL runs
// out (20 s), and the others fail over to the synchronous standby.
func (n *PatroniNode) Kill(ctx context.Context) error {
	cli, err := docker(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = cli.Close() }()
	if _, err := cli.ContainerKill(ctx, n.ctr.GetContainerID(), client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		return fmt.Errorf("kill %s: %w", n.Name, err)
	}
	return nil
}

// Start starts a killed node's container again: Patroni rejoins the
// cluster (rewinding its PostgreSQL if it was the leader). Its ports are
// mapped anew, so API and DSN change.
func (n *PatroniNode) Start(ctx context.Context) error {
	if err := n.ctr.Start(ctx); err != nil {
		return withLog(fmt.Errorf("start %s again: %w", n.Name, err), n.ctr)
	}
	return n.endpoints(ctx)
}

// endpoints reads the node's mapped ports into API and DSN.
func (n *PatroniNode) endpoints(ctx context.Context) error {
	api, err := n.ctr.PortEndpoint(ctx, "8008/tcp", "http")
	if err != nil {
		return err
	}
	n.API = strings.Replace(api, "127.0.0.1", "localhost", 1)
	port, err := n.ctr.MappedPort(ctx, "5432/tcp")
	if err != nil {
		return err
	}
	n.DSN = fmt.Sprintf("postgres://postgres:%s@%s/postgres?sslmode=disable", patroniPassword, net.JoinHostPort("localhost", port.Port()))
	return nil
}

// get reads a JSON document from the node's REST API.
func (n *PatroniNode) get(ctx context.Context, path string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.API+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", n.Name, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %s", n.Name, path, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// remove removes the containers and the network.
func (c *PatroniCluster) remove() error {
	ctrs := []testcontainers.Container{c.haproxy}
	for _, n := range c.Nodes {
		ctrs = append(ctrs, n.ctr)
	}
	return removeAll(append(ctrs, c.etcd), []*dockerNetwork{c.nw})
}
