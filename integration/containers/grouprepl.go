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
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// Images of a Group Replication cluster: the members run the MySQL image
// (IDEM_GROUP_MYSQL_IMAGE, default the mysql:9.7 stand-in, which ships
// group_replication.so), MySQL Router the router image
// (IDEM_ROUTER_IMAGE, default the stand-in; it must follow the contract
// of scripts/standin/mysql-router/docker-entrypoint.sh).
const (
	EnvGroupMySQLImage     = "IDEM_GROUP_MYSQL_IMAGE"
	EnvRouterImage         = "IDEM_ROUTER_IMAGE"
	DefaultGroupMySQLImage = "idem-standin/mysql:9.7"
	DefaultRouterImage     = "idem-standin/mysql-router:9.7"
)

// groupStartTimeout bounds starting three members, forming the group and
// starting the router.
const groupStartTimeout = 4 * time.Minute

// groupName is the group's UUID (group_replication_group_name).
const groupName = "6d0f2b4e-1c3a-4f7e-9a2b-5e8c7d6f4a31"

// GroupOptions say how a [GroupReplication] runs.
type GroupOptions struct {
	// MultiPrimary makes every member take writes
	// (group_replication_single_primary_mode=OFF, with
	// enforce_update_everywhere_checks); otherwise n1 is the primary and
	// the others are read-only secondaries.
	MultiPrimary bool
}

// GroupReplication is a MySQL Group Replication cluster of three members,
// with MySQL Router in front (static routing, first-available: n1, n2, n3,
// the members' weights making n2 the next primary after n1). The members
// talk to each other (group communication, XCom on 33061, and distributed
// recovery) over a network of their own, where member n1 is g1; tests and
// the router reach them over another, so that Partition cuts a member from
// the group but not from the test.
type GroupReplication struct {
	// Router is the DSN of MySQL Router (go-sql-driver/mysql form, no
	// parameters): root:idem@tcp(localhost:PORT)/idem.
	Router string
	// Members are n1, n2 and n3.
	Members []*GroupMember

	router       testcontainers.Container
	front, group *dockerNetwork
}

// GroupMember is one member of a [GroupReplication].
type GroupMember struct {
	// Name is n1, n2 or n3; on the group network it is g1, g2 or g3.
	Name string
	// DSN is the member's own, without parameters.
	DSN string

	ctr   testcontainers.Container
	admin *sql.DB
}

// StartGroupReplication starts a cluster for tb and removes it when tb
// ends. It skips tb, or fails it when IDEM_REQUIRE names grouprepl, if an
// image cannot be had; it fails tb if the group does not form within the
// start bound.
func StartGroupReplication(tb testing.TB, opts GroupOptions) *GroupReplication {
	tb.Helper()
	images := []string{os.Getenv(EnvGroupMySQLImage), os.Getenv(EnvRouterImage)}
	if images[0] == "" {
		images[0] = DefaultGroupMySQLImage
	}
	if images[1] == "" {
		images[1] = DefaultRouterImage
	}
	for _, image := range images {
		if reason, _ := ensureImage(image); reason != "" {
			msg := fmt.Sprintf("Group Replication: %s.\nBuild the images with scripts/standin/build mysql:9.7 mysql-router:9.7 (./scripts/test does), or name others with %s and %s.",
				reason, EnvGroupMySQLImage, EnvRouterImage)
			if required("grouprepl") {
				tb.Fatalf("%s\n%s names grouprepl, so this is a failure.", msg, EnvRequire)
			}
			tb.Skipf("%s\nSet %s=grouprepl to make this a failure.", msg, EnvRequire)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), groupStartTimeout)
	defer cancel()
	begin := time.Now()
	g := &GroupReplication{}
	tb.Cleanup(func() {
		if err := g.remove(); err != nil {
			tb.Errorf("remove the Group Replication cluster: %v", err)
		}
	})
	if err := g.start(ctx, images[0], images[1], opts); err != nil {
		tb.Fatalf("start a Group Replication cluster from %s (limit %s): %v", strings.Join(images, ", "), groupStartTimeout, err)
	}
	mode := "single-primary"
	if opts.MultiPrimary {
		mode = "multi-primary"
	}
	tb.Logf("Group Replication (%s) of %d members from %s online in %.1fs", mode, len(g.Members), images[0], time.Since(begin).Seconds())
	return g
}

// memberArgs are a member's mysqld options. The plugin's are "loose": the
// entrypoint's --initialize-insecure ignores --plugin-load-add, and would
// refuse options of a plugin it did not load.
func memberArgs(i int, opts GroupOptions) []string {
	n := strconv.Itoa(i + 1)
	single, everywhere := "ON", "OFF"
	if opts.MultiPrimary {
		single, everywhere = "OFF", "ON"
	}
	return []string{
		"--server-id=" + n, "--report-host=g" + n,
		"--gtid-mode=ON", "--enforce-gtid-consistency=ON",
		"--plugin-load-add=group_replication.so",
		"--loose-group-replication-group-name=" + groupName,
		"--loose-group-replication-start-on-boot=OFF",
		"--loose-group-replication-communication-stack=XCOM",
		"--loose-group-replication-local-address=g" + n + ":33061",
		"--loose-group-replication-group-seeds=g1:33061,g2:33061,g3:33061",
		"--loose-group-replication-single-primary-mode=" + single,
		"--loose-group-replication-enforce-update-everywhere-checks=" + everywhere,
		// n1 first, then n2: the order the router tries them in.
		"--loose-group-replication-member-weight=" + strconv.Itoa(90-20*i),
		// A member cut from the majority gives up on its pending
		// transactions after 5 s (rather than waiting for ever).
		"--loose-group-replication-unreachable-majority-timeout=5",
		"--loose-group-replication-recovery-get-public-key=ON",
		"--max-connections=300", "--innodb-buffer-pool-size=64M", "--innodb-flush-log-at-trx-commit=2",
	}
}

func (g *GroupReplication) start(ctx context.Context, memberImage, routerImage string, opts GroupOptions) error {
	// "a-front" sorts before "b-group": the mapped ports stay on front.
	nets, err := newNetworks(ctx, "grouprepl", "a-front", "b-group")
	if len(nets) > 0 {
		g.front = nets[0]
	}
	if len(nets) > 1 {
		g.group = nets[1]
	}
	if err != nil {
		return err
	}
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range 3 {
		m := &GroupMember{Name: "n" + strconv.Itoa(i+1)}
		g.Members = append(g.Members, m)
		wg.Go(func() { errs[i] = g.startMember(ctx, m, i, memberImage, opts) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for i, m := range g.Members {
		if err := m.join(ctx, i == 0); err != nil {
			return withLog(fmt.Errorf("%s joins the group: %w", m.Name, err), m.ctr)
		}
	}
	if err := g.WaitOnline(ctx, 3); err != nil {
		return err
	}
	var dests []string
	for _, m := range g.Members {
		dests = append(dests, m.Name+":3306")
	}
	g.router, err = testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{
		ContainerRequest: testcontainers.ContainerRequest{
			Image:        routerImage,
			Env:          map[string]string{"ROUTER_DESTINATIONS": strings.Join(dests, ",")},
			ExposedPorts: []string{"6446/tcp"},
			Networks:     []string{g.front.Name},
			Labels:       labels("grouprepl"),
			WaitingFor:   wait.ForListeningPort("6446/tcp").WithStartupTimeout(groupStartTimeout),
		},
		Started: true,
	})
	if err != nil {
		return withLog(fmt.Errorf("router: %w", err), g.router)
	}
	port, err := g.router.MappedPort(ctx, "6446/tcp")
	if err != nil {
		return err
	}
	g.Router = fmt.Sprintf("%s:%s@tcp(%s)/%s", myUser, myPassword, net.JoinHostPort("localhost", port.Port()), myDatabase)
	return nil
}

// startMember starts member m (the i-th) and waits until it answers.
func (g *GroupReplication) startMember(ctx context.Context, m *GroupMember, i int, image string, opts GroupOptions) error {
	pingDSN := func(host string, port network.Port) string {
		return fmt.Sprintf("%s:%s@tcp(%s)/%s", myUser, myPassword, net.JoinHostPort(host, port.Port()), myDatabase)
	}
	ctr, err := testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{
		ContainerRequest: testcontainers.ContainerRequest{
			Image:        image,
			Env:          map[string]string{"MYSQL_ROOT_PASSWORD": myPassword, "MYSQL_DATABASE": myDatabase},
			Cmd:          memberArgs(i, opts),
			ExposedPorts: []string{"3306/tcp"},
			// The first network is the container's at creation, and carries
			// its mapped port; the group network is joined after.
			Networks: []string{g.front.Name, g.group.Name},
			NetworkAliases: map[string][]string{
				g.front.Name: {m.Name},
				g.group.Name: {"g" + strconv.Itoa(i+1)},
			},
			Labels: labels("grouprepl"),
			WaitingFor: wait.ForAll(
				wait.ForListeningPort("3306/tcp").WithStartupTimeout(groupStartTimeout),
				wait.ForSQL("3306/tcp", "mysql", pingDSN).WithStartupTimeout(groupStartTimeout).WithPollInterval(250*time.Millisecond),
			).WithDeadline(groupStartTimeout),
		},
		Started: true,
	})
	m.ctr = ctr
	if err != nil {
		return withLog(fmt.Errorf("member %s: %w", m.Name, err), ctr)
	}
	port, err := ctr.MappedPort(ctx, "3306/tcp")
	if err != nil {
		return fmt.Errorf("mapped port: %w", err)
	}
	m.DSN = fmt.Sprintf("%s:%s@tcp(%s)/%s", myUser, myPassword, net.JoinHostPort("localhost", port.Port()), myDatabase)
	m.admin, err = sql.Open("mysql", m.DSN+"?timeout=5s&readTimeout=30s&writeTimeout=30s")
	if err != nil {
		return err
	}
	m.admin.SetMaxOpenConns(2)
	return nil
}

// join sets up the member's recovery account and starts Group
// Replication on it, bootstrapping the group on the first. The members
// were initialised apart (each logged its own GTIDs for the same accounts
// and database), so each forgets them first.
func (m *GroupMember) join(ctx context.Context, bootstrap bool) error {
	conn, err := m.admin.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	stmts := []string{
		"SET SQL_LOG_BIN = 0",
		"CREATE USER IF NOT EXISTS rpl@'%' IDENTIFIED BY '" + myPassword + "'",
		"GRANT REPLICATION SLAVE, CONNECTION_ADMIN, BACKUP_ADMIN, GROUP_REPLICATION_STREAM ON *.* TO rpl@'%'",
		"SET SQL_LOG_BIN = 1",
		"RESET BINARY LOGS AND GTIDS",
		"CHANGE REPLICATION SOURCE TO SOURCE_USER = 'rpl', SOURCE_PASSWORD = '" + myPassword + "' FOR CHANNEL 'group_replication_recovery'",
	}
	if bootstrap {
		stmts = append(stmts, "SET GLOBAL group_replication_bootstrap_group = ON", "START GROUP_REPLICATION", "SET GLOBAL group_replication_bootstrap_group = OFF")
	} else {
		stmts = append(stmts, "START GROUP_REPLICATION")
	}
	for _, s := range stmts {
		if _, err := conn.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	return nil
}

// GroupMemberState is a member as performance_schema reports it.
type GroupMemberState struct {
	Host, State, Role string // "g1", "ONLINE", "PRIMARY"
}

// States reads the group's members as m sees them.
func (m *GroupMember) States(ctx context.Context) ([]GroupMemberState, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rows, err := m.admin.QueryContext(ctx, "SELECT MEMBER_HOST, MEMBER_STATE, MEMBER_ROLE FROM performance_schema.replication_group_members")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []GroupMemberState
	for rows.Next() {
		var s GroupMemberState
		if err := rows.Scan(&s.Host, &s.State, &s.Role); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// WaitOnline waits, within ctx, until some member sees n members ONLINE.
func (g *GroupReplication) WaitOnline(ctx context.Context, n int) error {
	var last string
	for {
		for _, m := range g.Members {
			states, err := m.States(ctx)
			online := 0
			for _, s := range states {
				if s.State == "ONLINE" {
					online++
				}
			}
			if err == nil && online == n {
				return nil
			}
			last = fmt.Sprintf("%s sees %+v (error %v)", m.Name, states, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the group has not %d members online: %w (last: %s)", n, ctx.Err(), last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// Kill kills the member's server at once (SIGKILL).
func (m *GroupMember) Kill(ctx context.Context) error {
	cli, err := docker(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = cli.Close() }()
	if _, err := cli.ContainerKill(ctx, m.ctr.GetContainerID(), client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		return fmt.Errorf("kill %s: %w", m.Name, err)
	}
	return nil
}

// Partition takes m off the group network: it loses the majority (its
// transactions waiting for certification give up after 5 s), while the
// test still reaches it.
func (g *GroupReplication) Partition(ctx context.Context, m *GroupMember) error {
	return disconnect(ctx, g.group, m.ctr)
}

// remove removes the router, the members and the networks.
func (g *GroupReplication) remove() error {
	ctrs := []testcontainers.Container{g.router}
	for _, m := range g.Members {
		if m.admin != nil {
			_ = m.admin.Close()
		}
		ctrs = append(ctrs, m.ctr)
	}
	return removeAll(ctrs, []*dockerNetwork{g.front, g.group})
}
