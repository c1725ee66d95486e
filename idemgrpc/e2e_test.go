package idemgrpc_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemgrpc"
)

// lossy sits outside idem's interceptor like a flaky network: for a
// deterministic third of the keys it lets the first attempt run (and
// commit) and then loses its answer, answering Unavailable instead. It
// records the original answer of every key and how often one was produced.
type lossy struct {
	mu        sync.Mutex
	attempts  map[string]int
	original  map[string]*structpb.Struct
	originals map[string]int // non-replayed successful answers per key
	lost      int
}

func (l *lossy) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	key := md.Get(idemgrpc.MetadataKey)[0]
	l.mu.Lock()
	l.attempts[key]++
	n := l.attempts[key]
	l.mu.Unlock()

	// Capture the header idem sets, to tell originals from replays.
	var replayed bool
	resp, err := h(grpc.NewContextWithServerTransportStream(ctx, &headerSpy{ServerTransportStream: grpc.ServerTransportStreamFromContext(ctx), replayed: &replayed}), req)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err == nil && !replayed {
		l.originals[key]++
		l.original[key] = proto.Clone(resp.(proto.Message)).(*structpb.Struct)
	}
	h32 := fnv.New32a()
	h32.Write([]byte(key))
	if err == nil && n == 1 && h32.Sum32()%3 == 0 {
		l.lost++
		return nil, status.Error(codes.Unavailable, "connection reset after the server answered")
	}
	return resp, err
}

// headerSpy notes the replay header on its way out.
type headerSpy struct {
	grpc.ServerTransportStream
	replayed *bool
}

func (s *headerSpy) SetHeader(md metadata.MD) error {
	if v := md.Get(idemgrpc.MetadataReplayed); len(v) == 1 && v[0] == "true" {
		*s.replayed = true
	}
	return s.ServerTransportStream.SetHeader(md)
}

// TestEndToEnd runs the interceptors on a real listener on 127.0.0.1: a
// server whose answers are lost after the commit for a third of the calls,
// and clients that retry with the same key. Every call creates exactly one
// order and gets the original answer.
func TestEndToEnd(t *testing.T) {
	const clients, perClient = 8, 15
	o := newOrders(t, idem.Config{})
	l := &lossy{attempts: map[string]int{}, original: map[string]*structpb.Struct{}, originals: map[string]int{}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serve(t, lis, o.create, l.intercept, newServer(t, o, idemgrpc.Config{}).UnaryInterceptor())
	conn, err := grpc.NewClient(lis.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor((&idemgrpc.Client{BaseDelay: 5 * time.Millisecond}).UnaryInterceptor()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	type result struct {
		item  string
		reply *structpb.Struct
		err   error
	}
	results := make([]result, clients*perClient)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for i := range perClient {
				r := &results[c*perClient+i]
				r.item = fmt.Sprintf("item-%d-%d", c, i)
				req, _ := structpb.NewStruct(map[string]any{"item": r.item})
				r.reply = new(structpb.Struct)
				var header metadata.MD
				r.err = conn.Invoke(metadata.AppendToOutgoingContext(ctx, "tenant", fmt.Sprintf("tenant-%d", c%3)),
					createOrder, req, r.reply, grpc.Header(&header))
			}
		})
	}
	wg.Wait()

	if n := o.count(t); n != len(results) {
		t.Errorf("%d orders, want %d: one per call", n, len(results))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for key, n := range l.originals {
		if n != 1 {
			t.Errorf("key %s: %d original answers, want 1", key, n)
		}
	}
	if len(l.originals) != len(results) {
		t.Errorf("%d keys produced an answer, want %d", len(l.originals), len(results))
	}
	byItem := map[string]*structpb.Struct{}
	for _, resp := range l.original {
		byItem[resp.GetFields()["item"].GetStringValue()] = resp
	}
	for _, r := range results {
		if r.err != nil {
			t.Errorf("%s: %v", r.item, r.err)
			continue
		}
		if want := byItem[r.item]; !proto.Equal(r.reply, want) {
			t.Errorf("%s: got %v, want the original answer %v", r.item, r.reply, want)
		}
	}
	t.Logf("%d calls, %d answers lost after the commit and replayed on retry", len(results), l.lost)
	if l.lost == 0 {
		t.Error("no answer was lost: the test proves nothing")
	}
}
