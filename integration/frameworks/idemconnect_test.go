package frameworks_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemconnect"
	"github.com/idemkit/idem/integration/containers"
	"github.com/idemkit/idem/postgres"
)

// The Connect service of these tests, described by hand (no .proto file,
// no generated code) and registered as generated code would be: one
// procedure taking and returning a google.protobuf.Struct.
const connectCreate = "/idemconnect.frameworks.Orders/Create"

var connectCreateSchema = func() protoreflect.MethodDescriptor {
	fd := &descriptorpb.FileDescriptorProto{
		Name:       proto.String("idemconnect/frameworks/orders.proto"),
		Package:    proto.String("idemconnect.frameworks"),
		Dependency: []string{"google/protobuf/struct.proto"},
		Syntax:     proto.String("proto3"),
		Service: []*descriptorpb.ServiceDescriptorProto{{
			Name: proto.String("Orders"),
			Method: []*descriptorpb.MethodDescriptorProto{{
				Name:       proto.String("Create"),
				InputType:  proto.String(".google.protobuf.Struct"),
				OutputType: proto.String(".google.protobuf.Struct"),
			}},
		}},
	}
	f, err := protodesc.NewFile(fd, protoregistry.GlobalFiles)
	if err != nil {
		panic(err)
	}
	if err := protoregistry.GlobalFiles.RegisterFile(f); err != nil {
		panic(err)
	}
	return f.Services().Get(0).Methods().Get(0)
}()

// connectService is a Connect handler on PostgreSQL (database/sql over
// pgx, serializable) behind idemconnect: Create adds the request's amount
// to one counter row (read, then write: concurrent runs conflict and are
// re-run) and inserts an order, in the interceptor's transaction.
type connectService struct {
	db      *sql.DB
	orders  string // the test's own tables
	counter string
	srv     *httptest.Server

	mu   sync.Mutex
	runs int
	// overlap, when set, holds each run after its read until that many
	// runs have read (or a second passed), so that their writes conflict.
	overlap int
	read    int
	allRead chan struct{}
}

func newConnectService(t *testing.T, overlap int) *connectService {
	t.Helper()
	dsn := containers.Postgres(t)
	db, err := sql.Open("pgx", dsn) // database/sql over pgx's stdlib driver
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(20)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	drv, err := postgres.NewSQL(ctx, db, postgres.Options{Isolation: sql.LevelSerializable})
	if err != nil {
		t.Fatal(err)
	}
	suffix := fmt.Sprintf("%d", time.Now().UnixNano())
	store, err := idem.New(drv, idem.Config{Table: "connect_idem_" + suffix, WaitBound: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	s := &connectService{db: db, orders: "connect_orders_" + suffix, counter: "connect_counter_" + suffix, overlap: overlap, allRead: make(chan struct{})}
	for _, q := range []string{
		"CREATE TABLE " + s.orders + " (id BIGSERIAL PRIMARY KEY, item TEXT NOT NULL)",
		"CREATE TABLE " + s.counter + " (id INT PRIMARY KEY, total BIGINT NOT NULL)",
		"INSERT INTO " + s.counter + " VALUES (1, 0)",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, tbl := range []string{s.orders, s.counter, "connect_idem_" + suffix} {
			_, _ = db.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+tbl)
		}
	})
	protect, err := idemconnect.New(store, idemconnect.Config{
		Principal: func(_ context.Context, req connect.AnyRequest) string { return req.Header().Get("X-Tenant") },
		Logger:    quietConnectLogger,
	})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(connectCreate, connect.NewUnaryHandler(connectCreate, s.create,
		connect.WithSchema(connectCreateSchema), connect.WithInterceptors(protect.Interceptor())))
	s.srv = httptest.NewUnstartedServer(mux)
	s.srv.EnableHTTP2 = true
	s.srv.StartTLS()
	t.Cleanup(s.srv.Close)
	return s
}

func (s *connectService) create(ctx context.Context, req *connect.Request[structpb.Struct]) (*connect.Response[structpb.Struct], error) {
	s.mu.Lock()
	s.runs++
	s.mu.Unlock()
	tx, ok := idemconnect.Tx[*sql.Tx](ctx)
	if !ok {
		return nil, errors.New("no transaction in the handler's context")
	}
	var total int64
	if err := tx.QueryRowContext(ctx, "SELECT total FROM "+s.counter+" WHERE id = 1").Scan(&total); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.read++
	if s.read == s.overlap {
		close(s.allRead)
	}
	s.mu.Unlock()
	if s.overlap > 0 {
		select {
		case <-s.allRead:
		case <-time.After(time.Second):
		}
	}
	total += int64(req.Msg.GetFields()["amount"].GetNumberValue())
	if _, err := tx.ExecContext(ctx, "UPDATE "+s.counter+" SET total = $1 WHERE id = 1", total); err != nil {
		return nil, err
	}
	var id int64
	if err := tx.QueryRowContext(ctx, "INSERT INTO "+s.orders+" (item) VALUES ($1) RETURNING id",
		req.Msg.GetFields()["item"].GetStringValue()).Scan(&id); err != nil {
		return nil, err
	}
	msg, err := structpb.NewStruct(map[string]any{"id": float64(id), "total": float64(total)})
	if err != nil {
		return nil, err
	}
	resp := connect.NewResponse(msg)
	resp.Header().Set("X-Order", fmt.Sprint(id))
	return resp, nil
}

func (s *connectService) client(opts ...connect.ClientOption) *connect.Client[structpb.Struct, structpb.Struct] {
	opts = append([]connect.ClientOption{connect.WithSchema(connectCreateSchema)}, opts...)
	return connect.NewClient[structpb.Struct, structpb.Struct](s.srv.Client(), s.srv.URL+connectCreate, opts...)
}

func (s *connectService) count(t *testing.T) (orders, total int64) {
	t.Helper()
	if err := s.db.QueryRowContext(t.Context(), "SELECT (SELECT COUNT(*) FROM "+s.orders+"), (SELECT total FROM "+s.counter+")").Scan(&orders, &total); err != nil {
		t.Fatal(err)
	}
	return orders, total
}

func connectCall(ctx context.Context, c *connect.Client[structpb.Struct, structpb.Struct], fields map[string]any, header ...string) (*connect.Response[structpb.Struct], error) {
	msg, err := structpb.NewStruct(fields)
	if err != nil {
		return nil, err
	}
	req := connect.NewRequest(msg)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header().Set(header[i], header[i+1])
	}
	return c.CallUnary(ctx, req)
}

// TestConnectPostgresReplay: on PostgreSQL, a call and its retries over
// the Connect protocol (JSON) and the gRPC protocol get one answer, byte
// for byte, the retries marked replayed; another request with the key is
// FailedPrecondition; one order exists per key.
func TestConnectPostgresReplay(t *testing.T) {
	s := newConnectService(t, 0)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	jsonClient, grpcClient := s.client(connect.WithProtoJSON()), s.client(connect.WithGRPC())
	first, err := connectCall(ctx, jsonClient, map[string]any{"item": "book", "amount": 5}, idemconnect.HeaderKey, "k1", "X-Tenant", "acme")
	if err != nil {
		t.Fatal(err)
	}
	want, _ := proto.MarshalOptions{Deterministic: true}.Marshal(first.Msg)
	for _, c := range []*connect.Client[structpb.Struct, structpb.Struct]{jsonClient, grpcClient} {
		again, err := connectCall(ctx, c, map[string]any{"item": "book", "amount": 5}, idemconnect.HeaderKey, "k1", "X-Tenant", "acme")
		if err != nil {
			t.Fatalf("retry: %v", err)
		}
		got, _ := proto.MarshalOptions{Deterministic: true}.Marshal(again.Msg)
		if string(got) != string(want) || again.Header().Get(idemconnect.HeaderReplayed) != "true" || again.Header().Get("X-Order") != first.Header().Get("X-Order") {
			t.Errorf("retry: %v %v, want a replay of %v %v", again.Msg, again.Header(), first.Msg, first.Header())
		}
	}
	_, err = connectCall(ctx, grpcClient, map[string]any{"item": "lamp", "amount": 5}, idemconnect.HeaderKey, "k1", "X-Tenant", "acme")
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || idemconnect.Reason(err) != idemconnect.ReasonMismatch {
		t.Errorf("other request, same key: %v, want FailedPrecondition %s", err, idemconnect.ReasonMismatch)
	}
	if orders, total := s.count(t); orders != 1 || total != 5 {
		t.Errorf("%d orders, total %d; want 1 and 5", orders, total)
	}
}

// TestConnectPostgresConcurrent: at SERIALIZABLE, concurrent calls through
// idemconnect.Client, several retries of each of several keys, conflict
// on one counter row: conflicting runs are rolled back and re-run, every
// key is done once, and every call of one key gets one answer.
func TestConnectPostgresConcurrent(t *testing.T) {
	const keys, callsPerKey = 8, 3
	s := newConnectService(t, keys) // the first run of every key reads before any writes
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	c := s.client(connect.WithGRPC(), connect.WithInterceptors((&idemconnect.Client{MaxAttempts: 50, BaseDelay: 10 * time.Millisecond, MaxDelay: 200 * time.Millisecond}).Interceptor()))
	answers := make([][]float64, keys)
	errs := make(chan error, keys*callsPerKey)
	var wg sync.WaitGroup
	var mu sync.Mutex
	for k := range keys {
		for range callsPerKey {
			wg.Go(func() {
				resp, err := connectCall(ctx, c, map[string]any{"item": fmt.Sprint("item-", k), "amount": 1},
					idemconnect.HeaderKey, fmt.Sprint("key-", k), "X-Tenant", "acme")
				if err != nil {
					errs <- fmt.Errorf("key %d: %w", k, err)
					return
				}
				mu.Lock()
				answers[k] = append(answers[k], resp.Msg.GetFields()["id"].GetNumberValue())
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for k, ids := range answers {
		for _, id := range ids {
			if id != ids[0] {
				t.Errorf("key %d: answers %v, want one order id", k, ids)
				break
			}
		}
	}
	if orders, total := s.count(t); orders != keys || total != keys {
		t.Errorf("%d orders, total %d; want %d and %d", orders, total, keys, keys)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.runs <= keys {
		t.Errorf("%d handler runs for %d keys: the overlapping writes should have conflicted and been re-run", s.runs, keys)
	}
	t.Logf("%d handler runs for %d keys", s.runs, keys)
}

var quietConnectLogger = slog.New(slog.NewTextHandler(io.Discard, nil))
